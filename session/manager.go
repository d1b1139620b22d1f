package session

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// ErrClosed is returned (inside a BackendFailure error) by a Manager that
// Close has ended.
var ErrClosed = errors.New("session: manager closed")

// Held is a session's sandbox as the daemon leased it, for the session's
// whole life: Release gives it back, which destroys it (a sandbox that held
// a tenant's session is never handed to another).
type Held struct {
	Sandbox sandbox.Sandbox
	Release func() error
}

// Acquire leases the sandbox of one new session, to be claimed for c: the
// daemon's admission and pool, for the backend it selected. ctx bounds the
// wait and the preparation only.
type Acquire func(ctx context.Context, c *sandbox.Claim) (Held, error)

// Config configures a Manager. It is read once, by New.
type Config struct {
	// Store keeps the session records. Required.
	Store *store.Store
	// Admit is asked, before anything is recorded, whether tenant may have
	// one more session beside the live ones it has (creating and running);
	// its error is returned as it is (the daemon's quota, a 429). Nil
	// admits every one.
	Admit func(tenant string, live int) error
	// Logger receives lifecycle logs. Nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock of activity and transitions. Nil means time.Now.
	Now func() time.Time
	// Dir keeps the workspaces of paused sessions (pause.go); it is made
	// 0700 if missing. With Reacquire it makes an idle session pause
	// instead of ending; without either, sessions never pause.
	Dir string
	// Reacquire leases the new sandbox of a resuming session of tenant on
	// backend, the one it was created on, to be claimed for c: the daemon
	// refuses (typed) while the backend may not hold the session, then
	// admits and leases as for Create — a fresh sandbox, or where from is
	// set the session's saved sandbox restored for tenant (snapshot.go),
	// which is NotFound if the backend no longer has it.
	Reacquire func(ctx context.Context, tenant, backend string, c *sandbox.Claim, from *sandbox.Paused) (Held, error)
	// Discard deletes a saved sandbox that no session needs any more. With
	// it (and Dir and Reacquire), a session whose sandbox can be saved
	// whole (sandbox.Pauser) pauses by snapshot, keeping its processes.
	Discard func(ctx context.Context, p sandbox.Paused) error
}

// Manager keeps this daemon's sessions. It is safe for concurrent use.
type Manager struct {
	st    *store.Store
	admit func(string, int) error
	log   *slog.Logger
	now   func() time.Time
	dir   string
	// reacquire, discard: Config's.
	reacquire func(context.Context, string, string, *sandbox.Claim, *sandbox.Paused) (Held, error)
	discard   func(context.Context, sandbox.Paused) error

	mu     sync.Mutex
	live   map[string]*live // creating and running sessions
	closed bool
}

// View is a session as a tenant sees it: its record and, while it lives,
// its activity.
type View struct {
	store.Session
	LastActive time.Time // zero once ended
	Execs      int       // execs run by this daemon
}

// live is one creating or running session. op is held by whatever uses or
// ends the sandbox, so operations of one session run one at a time and an
// end waits for the operation in flight; mu guards the fields below it.
type live struct {
	id, tenant string
	backend    string
	spec       Spec
	op         sync.Mutex
	sb         sandbox.Session
	release    func() error
	ended      bool // under op

	mu         sync.Mutex
	rec        store.Session
	lastActive time.Time
	busy       bool
	execs      int
	cancel     context.CancelFunc    // of the operation in flight
	runs       map[string]*run       // execs whose end is not yet durable
	bg         map[string]store.Exec // background execs recorded as running (background.go)
}

// New returns a manager with no session.
func New(cfg Config) (*Manager, error) {
	if cfg.Store == nil {
		return nil, errors.New("session: a store is required")
	}
	m := &Manager{st: cfg.Store, admit: cfg.Admit, log: cfg.Logger, now: cfg.Now, dir: cfg.Dir, reacquire: cfg.Reacquire,
		discard: cfg.Discard, live: map[string]*live{}}
	if m.dir != "" {
		if err := os.MkdirAll(m.dir, 0o700); err != nil {
			return nil, fmt.Errorf("session: %w", err)
		}
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	if m.now == nil {
		m.now = time.Now
	}
	return m, nil
}

// Create makes a session of tenant on backend (which the caller selected)
// from sp: validated (BadInput, nothing recorded), admitted (Config.Admit),
// recorded as creating, its sandbox leased by acquire and opened with the
// session's claim, then recorded as running. A failure after the record
// ends it as create-failed and returns the error.
func (m *Manager) Create(ctx context.Context, tenant, backend string, sp Spec, acquire Acquire) (View, error) {
	sp, err := sp.withDefaults()
	if err != nil {
		return View{}, err
	}
	id := newID()
	c := sp.claim(id, tenant)
	if err := c.Validate(); err != nil {
		return View{}, err
	}
	now := m.now()
	rec := store.Session{ID: id, Tenant: tenant, Backend: backend, State: store.SessionCreating, Claim: *c,
		IdleTimeout: sp.IdleTimeout, MaxLifetime: sp.MaxLifetime, Created: now,
		Transitions: []store.SessionTransition{{State: store.SessionCreating, At: now}}}
	l := &live{id: id, tenant: tenant, backend: backend, spec: sp, rec: rec, lastActive: now, runs: map[string]*run{}}
	l.op.Lock()
	defer l.op.Unlock()
	if err := m.add(l); err != nil {
		return View{}, err
	}
	if err := m.st.BeginSession(rec); err != nil {
		m.remove(l)
		return View{}, sandbox.Wrap(sandbox.BackendFailure, err, "record session")
	}
	if err := m.open(ctx, l, c, acquire); err != nil {
		m.end(l, store.SessionEnded, ReasonCreateFailed, m.now())
		return View{}, err
	}
	if err := m.record(l, store.SessionRunning, "", m.now()); err != nil {
		m.end(l, store.SessionEnded, ReasonCreateFailed, m.now())
		return View{}, sandbox.Wrap(sandbox.BackendFailure, err, "record session")
	}
	m.log.Info("session", "id", id, "tenant", tenant, "backend", backend, "state", store.SessionRunning,
		"idle_timeout", sp.IdleTimeout, "max_lifetime", sp.MaxLifetime)
	return l.view(), nil
}

// add admits l and makes it live.
func (m *Manager) add(l *live) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return sandbox.Wrap(sandbox.BackendFailure, ErrClosed, "create session")
	}
	if m.admit != nil {
		n := 0
		for _, o := range m.live {
			if o.tenant == l.tenant {
				n++
			}
		}
		if err := m.admit(l.tenant, n); err != nil {
			return err
		}
	}
	m.live[l.id] = l
	return nil
}

func (m *Manager) remove(l *live) {
	m.mu.Lock()
	delete(m.live, l.id)
	m.mu.Unlock()
}

// open leases l's sandbox and claims it for c.
func (m *Manager) open(ctx context.Context, l *live, c *sandbox.Claim, acquire Acquire) error {
	held, err := acquire(ctx, c)
	if err != nil {
		return err
	}
	l.release = held.Release
	ss, ok := held.Sandbox.(sandbox.Session)
	if !ok {
		return sandbox.Errorf(sandbox.BackendFailure, "", "backend %s selected for a session cannot hold one", l.rec.Backend)
	}
	if err := ss.Open(ctx, c); err != nil {
		return err
	}
	l.sb = ss
	return nil
}

// record moves l's record to state to, durably, then in memory.
func (m *Manager) record(l *live, to store.SessionState, reason string, now time.Time) error {
	return m.recordWith(l, to, reason, now, nil)
}

// recordWith is record with fn's changes to the record made in the same
// write (fn may be nil).
func (m *Manager) recordWith(l *live, to store.SessionState, reason string, now time.Time, fn func(*store.Session)) error {
	return m.recordThen(l, to, reason, now, fn, nil)
}

// recordThen is recordWith that runs then once the record is durable and
// before the view shows it (nil: nothing): a pause gives its sandbox back
// there, so that a reader who sees the session paused finds it gone.
func (m *Manager) recordThen(l *live, to store.SessionState, reason string, now time.Time, fn func(*store.Session), then func()) error {
	l.mu.Lock()
	next := l.rec
	next.Transitions = slices.Clone(l.rec.Transitions)
	l.mu.Unlock()
	if err := transition(&next, to, reason, now); err != nil {
		return err
	}
	if fn != nil {
		fn(&next)
	}
	if err := m.st.UpdateSession(l.id, func(r *store.Session) error { *r = next; return nil }); err != nil {
		return err
	}
	if then != nil {
		then()
	}
	l.mu.Lock()
	l.rec = next
	l.mu.Unlock()
	return nil
}

// end ends l (its op held): the sandbox given back, which destroys it,
// then the record moved to state for reason. A failed record is logged:
// the next start-up finds the session live and records it interrupted.
func (m *Manager) end(l *live, state store.SessionState, reason string, now time.Time) {
	if l.ended {
		return
	}
	l.ended = true
	if l.release != nil {
		if err := l.release(); err != nil {
			m.log.Error("session sandbox release", "id", l.id, "tenant", l.tenant, "error", err)
		}
	}
	m.endBackground(l, "its session ended")
	l.mu.Lock()
	saved := l.rec.Paused
	l.mu.Unlock()
	err := m.recordWith(l, state, reason, now, func(r *store.Session) { r.Paused, r.PausedBytes = nil, 0 })
	if saved != nil && m.discard != nil {
		m.discardPaused(l, *saved)
	}
	if err != nil {
		m.log.Error("record session end", "id", l.id, "tenant", l.tenant, "state", state, "reason", reason, "error", err)
	}
	if m.dir != "" {
		// A paused session's kept workspace; its absence is the rule.
		if err := os.Remove(m.archivePath(l.id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			m.log.Error("remove a session's kept workspace", "id", l.id, "error", err)
		}
	}
	m.remove(l)
	l.mu.Lock()
	l.lastActive = time.Time{}
	l.mu.Unlock()
	m.log.Info("session", "id", l.id, "tenant", l.tenant, "backend", l.backend, "state", state, "reason", reason)
}

func (l *live) view() View {
	l.mu.Lock()
	defer l.mu.Unlock()
	rec := l.rec
	rec.Transitions = slices.Clone(l.rec.Transitions)
	return View{Session: rec, LastActive: l.lastActive, Execs: l.execs}
}

// notFound is the answer for an id the tenant does not own, the same
// whether it exists for another tenant or not at all.
func notFound(id string) error { return sandbox.Errorf(sandbox.NotFound, "id", "no session %s", id) }

// lookup finds tenant's session id: live (l), or ended (its record).
func (m *Manager) lookup(tenant, id string) (*live, store.Session, error) {
	m.mu.Lock()
	l := m.live[id]
	m.mu.Unlock()
	if l != nil {
		if l.tenant != tenant {
			return nil, store.Session{}, notFound(id)
		}
		return l, store.Session{}, nil
	}
	rec, err := m.st.GetSession(id)
	switch {
	case errors.Is(err, store.ErrNotFound) || err == nil && rec.Tenant != tenant:
		return nil, store.Session{}, notFound(id)
	case err != nil:
		return nil, store.Session{}, sandbox.Wrap(sandbox.BackendFailure, err, "read session")
	}
	return nil, rec, nil
}

// ended is the Conflict for a request to a session that has ended.
func ended(rec store.Session) error {
	return sandbox.Errorf(sandbox.Conflict, "id", "session %s has ended (%s: %s)", rec.ID, rec.State, rec.EndReason)
}

// Get returns tenant's session id.
func (m *Manager) Get(tenant, id string) (View, error) {
	l, rec, err := m.lookup(tenant, id)
	if err != nil {
		return View{}, err
	}
	if l != nil {
		return l.view(), nil
	}
	return View{Session: rec}, nil
}

// List returns tenant's sessions, live and ended (until purged), oldest
// first.
func (m *Manager) List(tenant string) ([]View, error) {
	out := []View{}
	err := m.st.EachSession(func(rec store.Session) error {
		if rec.Tenant == tenant {
			out = append(out, View{Session: rec})
		}
		return nil
	})
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "read sessions")
	}
	for i, v := range out {
		m.mu.Lock()
		l := m.live[v.ID]
		m.mu.Unlock()
		if l != nil {
			out[i] = l.view()
		}
	}
	slices.SortFunc(out, func(a, b View) int { return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.ID, b.ID)) })
	return out, nil
}

// use takes tenant's running session id for one operation (op held, the
// session busy); done gives it back.
func (m *Manager) use(ctx context.Context, tenant, id string) (*live, context.Context, error) {
	l, rec, err := m.lookup(tenant, id)
	if err != nil {
		return nil, nil, err
	}
	if l == nil {
		return nil, nil, ended(rec)
	}
	l.op.Lock()
	if !l.ended && l.isPaused() {
		if err := m.resume(ctx, l, ReasonResumed); err != nil {
			l.op.Unlock()
			return nil, nil, err
		}
	}
	if l.ended || l.sb == nil {
		v := l.view()
		l.op.Unlock()
		return nil, nil, ended(v.Session)
	}
	// The operation outlives its request: a caller that hangs up must not
	// leave the sandbox mid-job. Delete and the lifetime cancel it.
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.mu.Lock()
	l.busy, l.lastActive, l.cancel = true, m.now(), cancel
	l.mu.Unlock()
	return l, ctx, nil
}

// done ends l's operation; err is its error, and a BackendFailure ends the
// session (its sandbox can no longer be trusted to answer).
func (m *Manager) done(l *live, err error) {
	l.mu.Lock()
	l.cancel()
	l.busy, l.lastActive, l.cancel = false, m.now(), nil
	l.mu.Unlock()
	if sandbox.ClassOf(err) == sandbox.BackendFailure {
		m.end(l, store.SessionEnded, ReasonBackendFailure, m.now())
	}
	l.op.Unlock()
}

// File does op in tenant's session id.
func (m *Manager) File(ctx context.Context, tenant, id string, op *sandbox.FileOp) (*sandbox.FileReply, error) {
	if err := op.Validate(); err != nil {
		return nil, err
	}
	l, ctx, err := m.use(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	fr, err := l.sb.File(ctx, op)
	m.done(l, err)
	return fr, err
}

// Delete ends tenant's session id (reason deleted), cancelling the
// operation in flight, and returns its final view. An ended session is a
// Conflict.
func (m *Manager) Delete(tenant, id string) (View, error) {
	l, rec, err := m.lookup(tenant, id)
	if err != nil {
		return View{}, err
	}
	if l == nil {
		return View{}, ended(rec)
	}
	l.interrupt()
	l.op.Lock()
	defer l.op.Unlock()
	if l.ended {
		return View{}, ended(l.view().Session)
	}
	m.end(l, store.SessionEnded, ReasonDeleted, m.now())
	return l.view(), nil
}

// interrupt cancels l's operation in flight, if any.
func (l *live) interrupt() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel != nil {
		l.cancel()
	}
}

// Expire ends, as of now, every session past its lifetime (paused ones
// too) and pauses every running one idle for its idle timeout — or ends
// it, where the manager does not pause — and returns their ids. A session
// busy with an operation is not idle; one past its lifetime has that
// operation cancelled and ends at the next call. A session that cannot
// pause (its workspace over the bound) runs on, idle again from now. The
// daemon calls it on a timer; tests with their own clock.
func (m *Manager) Expire(now time.Time) []string {
	var out []string
	for _, l := range m.snapshot() {
		if !l.op.TryLock() {
			l.mu.Lock()
			over := now.Sub(l.rec.Created) >= l.spec.MaxLifetime
			l.mu.Unlock()
			if over {
				l.interrupt()
			}
			continue
		}
		l.mu.Lock()
		paused := l.rec.State == store.SessionPaused
		reason := ""
		switch {
		case l.ended || l.sb == nil && !paused:
		case now.Sub(l.rec.Created) >= l.spec.MaxLifetime:
			reason = ReasonLifetime
		case !paused && now.Sub(l.lastActive) >= l.spec.IdleTimeout:
			reason = ReasonIdle
		}
		l.mu.Unlock()
		switch {
		case reason == ReasonIdle && m.canPause():
			if err := m.pause(context.Background(), l, ReasonIdle); err != nil {
				m.log.Warn("idle session not paused", "id", l.id, "tenant", l.tenant, "error", err)
				if sandbox.ClassOf(err) == sandbox.BackendFailure {
					m.end(l, store.SessionEnded, ReasonBackendFailure, now)
				} else {
					l.mu.Lock()
					l.lastActive = now
					l.mu.Unlock()
				}
			}
			out = append(out, l.id)
		case reason != "":
			m.end(l, store.SessionEnded, reason, now)
			out = append(out, l.id)
		}
		l.op.Unlock()
	}
	return out
}

func (m *Manager) snapshot() []*live {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*live, 0, len(m.live))
	for _, l := range m.live {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b *live) int { return cmp.Compare(a.id, b.id) })
	return out
}

// Recover is start-up after a stop: every session recorded as creating or
// running has lost its sandbox with the daemon that held it (the backends'
// reconcilers remove what is left of them), so it is recorded as
// interrupted (daemon-restart), never silently dropped. It returns their
// ids. A paused session is live again, paused (ended, workspace-lost, if
// its workspace is gone), and what no paused session owns is removed from
// Config.Dir. Call it before the first Create.
func (m *Manager) Recover(now time.Time) ([]string, error) {
	var recs []store.Session
	err := m.st.EachSession(func(rec store.Session) error {
		if !rec.State.Terminal() {
			recs = append(recs, rec)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("session: recover: %w", err)
	}
	var ids []string
	var errs []error
	keep := map[string]bool{} // sessions paused by snapshot: their processes are saved
	for i := range recs {
		if pausedBySnapshot(&recs[i]) {
			keep[recs[i].ID] = true
		}
	}
	if _, err := m.st.InterruptExecs(now, func(session string) bool { return keep[session] }); err != nil {
		errs = append(errs, fmt.Errorf("session: recover execs: %w", err))
	}
	paused := map[string]bool{}
	for _, rec := range recs {
		if rec.State == store.SessionPaused {
			paused[rec.ID] = true
			if err := m.recoverPaused(rec, now); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		err := m.st.UpdateSession(rec.ID, func(r *store.Session) error {
			return transition(r, store.SessionInterrupted, ReasonRestart, now)
		})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ids = append(ids, rec.ID)
		m.log.Warn("session interrupted", "id", rec.ID, "tenant", rec.Tenant, "backend", rec.Backend, "reason", ReasonRestart)
	}
	if m.dir != "" {
		errs = append(errs, m.reconcileDir(paused))
	}
	return ids, errors.Join(errs...)
}

// Close ends every running session as interrupted (daemon-shutdown): their
// operations are cancelled, their sandboxes destroyed and their records
// written. Paused sessions stay paused, for the next start-up. Create
// fails afterwards.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	for _, l := range m.snapshot() {
		l.interrupt()
		l.op.Lock()
		if !l.isPaused() {
			m.end(l, store.SessionInterrupted, ReasonShutdown, m.now())
		}
		l.op.Unlock()
	}
}
