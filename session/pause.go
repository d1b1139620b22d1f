package session

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// A paused session has no sandbox: its workspace is kept on disk, as a tar
// archive the session's own agent made (sandbox.FileArchive), in
// Config.Dir/<id>.tar (0600, root's), and the next request that needs the
// sandbox — an exec, a file operation, or Resume — leases a fresh one of
// the same backend through Config.Reacquire, claims it with the session's
// claim as it was at creation, and extracts the workspace into it
// (store.ResumeRestart: the files come back, the processes do not). The
// record is written before the sandbox goes and the archive is removed
// only after the resumed record is, so a crash at any point leaves either
// a running session (interrupted at the next start-up) or a paused one
// whose archive is whole. A paused session survives a restart of the
// daemon (Recover loads it) and counts against its tenant's max_sessions
// as a running one does: its workspace holds the node's disk.
//
// A resume never picks another backend: Reacquire refuses (typed) while
// the backend may not hold the session — uncertified, or below what the
// session's policy now requires — and the session stays paused until it
// may.

// maxPausedBytes bounds a kept workspace: the archive is one agent reply.
const maxPausedBytes = sandbox.MaxFileBytes

// archiveSuffix names a kept workspace; tmpInfix one being written.
const (
	archiveSuffix = ".tar"
	tmpInfix      = ".tmp-"
)

// canPause says whether this manager pauses sessions (else an idle one
// ends).
func (m *Manager) canPause() bool { return m.dir != "" && m.reacquire != nil }

func (m *Manager) archivePath(id string) string { return filepath.Join(m.dir, id+archiveSuffix) }

// isPaused says whether l is paused (l.mu not held).
func (l *live) isPaused() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rec.State == store.SessionPaused
}

// Pause pauses tenant's session id now (reason requested), waiting for
// the operation in flight, and returns its view; a paused session is
// returned as it is. A workspace over the bound is a Conflict, and the
// session runs on.
func (m *Manager) Pause(ctx context.Context, tenant, id string) (View, error) {
	if !m.canPause() {
		return View{}, sandbox.Errorf(sandbox.Conflict, "", "this daemon keeps no paused sessions")
	}
	l, err := m.turn(tenant, id)
	if err != nil {
		return View{}, err
	}
	defer l.op.Unlock()
	if !l.isPaused() {
		if err := m.pause(ctx, l, ReasonRequested); err != nil {
			if sandbox.ClassOf(err) == sandbox.BackendFailure {
				m.end(l, store.SessionEnded, ReasonBackendFailure, m.now())
			}
			return View{}, err
		}
	}
	return l.view(), nil
}

// Resume resumes tenant's paused session id now (reason requested) and
// returns its view; a running session is returned as it is. A failed
// resume leaves the session paused, its workspace kept.
func (m *Manager) Resume(ctx context.Context, tenant, id string) (View, error) {
	l, err := m.turn(tenant, id)
	if err != nil {
		return View{}, err
	}
	defer l.op.Unlock()
	if l.isPaused() {
		if err := m.resume(ctx, l, ReasonRequested); err != nil {
			return View{}, err
		}
	}
	return l.view(), nil
}

// turn takes the op of tenant's live session id, for an operation on the
// session itself; the caller unlocks it.
func (m *Manager) turn(tenant, id string) (*live, error) {
	l, rec, err := m.lookup(tenant, id)
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, ended(rec)
	}
	l.op.Lock()
	if l.ended || l.sb == nil && !l.isPaused() {
		v := l.view()
		l.op.Unlock()
		return nil, ended(v.Session)
	}
	return l, nil
}

// pause keeps l's workspace, records l paused and gives its sandbox back
// (op held, l running). Until the record is durable nothing is given up:
// a failure leaves the session running.
func (m *Manager) pause(ctx context.Context, l *live, reason string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if done, err := m.pauseSnapshot(ctx, l, reason); done {
		return err
	}
	fr, err := l.sb.File(ctx, &sandbox.FileOp{Op: sandbox.FileArchive, Max: maxPausedBytes})
	if err != nil {
		if sandbox.ClassOf(err) == sandbox.BackendFailure {
			return err
		}
		return sandbox.Errorf(sandbox.Conflict, "", "session %s cannot pause: %s", l.id, sandbox.Public(err))
	}
	path := m.archivePath(l.id)
	if err := writeSynced(path, fr.Data); err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "keep the workspace of session %s", l.id)
	}
	err = m.recordThen(l, store.SessionPaused, reason, m.now(), func(r *store.Session) {
		r.Resume, r.PausedBytes = store.ResumeRestart, int64(len(fr.Data))
	}, func() {
		m.endBackground(l, "its session paused (resume: restart keeps its files, not its processes)")
		m.giveBack(l)
	})
	if err != nil {
		os.Remove(path)
		return sandbox.Wrap(sandbox.BackendFailure, err, "record session")
	}
	m.log.Info("session", "id", l.id, "tenant", l.tenant, "backend", l.backend, "state", store.SessionPaused,
		"reason", reason, "resume", store.ResumeRestart, "bytes", len(fr.Data))
	return nil
}

// resume gives paused l a fresh sandbox of its backend with its workspace
// (op held). A failure gives that sandbox back and leaves l paused; a
// workspace gone from disk ends l (workspace-lost), never silently.
func (m *Manager) resume(ctx context.Context, l *live, reason string) error {
	if !m.canPause() {
		return sandbox.Errorf(sandbox.Conflict, "", "session %s is paused and this daemon keeps no paused sessions", l.id)
	}
	l.mu.Lock()
	rec := l.rec
	l.mu.Unlock()
	if pausedBySnapshot(&rec) {
		return m.resumeSnapshot(ctx, l, reason, *rec.Paused)
	}
	data, err := os.ReadFile(m.archivePath(l.id))
	if errors.Is(err, fs.ErrNotExist) {
		m.end(l, store.SessionEnded, ReasonWorkspaceLost, m.now())
		return ended(l.view().Session)
	}
	if err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "read the workspace of session %s", l.id)
	}
	ss, fail, err := m.reopen(ctx, l, nil)
	if err != nil {
		return err
	}
	if _, err := ss.File(ctx, &sandbox.FileOp{Op: sandbox.FileExtract, Data: data}); err != nil {
		return fail(sandbox.Wrap(sandbox.BackendFailure, err, "restore the workspace of session %s", l.id))
	}
	err = m.recordWith(l, store.SessionRunning, reason, m.now(), func(r *store.Session) { r.PausedBytes = 0 })
	if err != nil {
		return fail(sandbox.Wrap(sandbox.BackendFailure, err, "record session"))
	}
	if err := os.Remove(m.archivePath(l.id)); err != nil {
		m.log.Warn("remove a resumed session's workspace", "id", l.id, "error", err) // reconciled at start-up
	}
	m.log.Info("session", "id", l.id, "tenant", l.tenant, "backend", l.backend, "state", store.SessionRunning,
		"reason", reason, "resume", store.ResumeRestart, "bytes", len(data))
	return nil
}

// reopen leases paused l's new sandbox through Config.Reacquire (from: its
// saved sandbox) and opens it with the session's claim. The session is
// l's once open; fail gives the sandbox back for a later step's failure
// and returns err.
func (m *Manager) reopen(ctx context.Context, l *live, from *sandbox.Paused) (_ sandbox.Session, fail func(error) error, _ error) {
	l.mu.Lock()
	c := l.rec.Claim
	l.mu.Unlock()
	held, err := m.reacquire(ctx, l.tenant, l.backend, &c, from)
	if err != nil {
		return nil, nil, err
	}
	fail = func(err error) error {
		l.sb, l.release = nil, nil
		if rerr := held.Release(); rerr != nil {
			m.log.Error("session sandbox release", "id", l.id, "tenant", l.tenant, "error", rerr)
		}
		return err
	}
	ss, ok := held.Sandbox.(sandbox.Session)
	if !ok {
		return nil, nil, fail(sandbox.Errorf(sandbox.BackendFailure, "", "backend %s cannot hold a session", l.backend))
	}
	if err := ss.Open(ctx, &c); err != nil {
		return nil, nil, fail(err)
	}
	l.sb, l.release = ss, held.Release
	return ss, fail, nil
}

// recoverPaused makes rec, a paused session found at start-up, live again
// (paused): or ends it, workspace-lost, if its archive is gone.
func (m *Manager) recoverPaused(rec store.Session, now time.Time) error {
	var err error
	var bg map[string]store.Exec
	if pausedBySnapshot(&rec) {
		// Its backend checks the saved sandbox at the resume; its
		// background execs are in it, still running.
		bg, err = m.runningBackground(rec.ID)
	} else {
		_, err = os.Stat(m.archivePath(rec.ID))
	}
	if m.dir == "" {
		err = errors.New("this daemon keeps no paused sessions")
	}
	if err != nil {
		m.log.Warn("paused session lost its workspace", "id", rec.ID, "tenant", rec.Tenant, "error", err)
		return m.st.UpdateSession(rec.ID, func(r *store.Session) error {
			return transition(r, store.SessionEnded, ReasonWorkspaceLost, now)
		})
	}
	c := rec.Claim
	sp := Spec{Image: c.Image, Limits: c.Limits, Policy: c.Policy, Resources: c.Resources,
		IdleTimeout: rec.IdleTimeout, MaxLifetime: rec.MaxLifetime}
	l := &live{id: rec.ID, tenant: rec.Tenant, backend: rec.Backend, spec: sp, rec: rec, lastActive: now, runs: map[string]*run{}, bg: bg}
	m.mu.Lock()
	m.live[l.id] = l
	m.mu.Unlock()
	return nil
}

// reconcileDir removes what no paused session owns from Config.Dir: the
// half-written archives of a dead daemon and the archives of sessions that
// resumed or ended while their removal failed.
func (m *Manager) reconcileDir(paused map[string]bool) error {
	ents, err := os.ReadDir(m.dir)
	if err != nil {
		return fmt.Errorf("session: reconcile %s: %w", m.dir, err)
	}
	var errs []error
	for _, e := range ents {
		name := e.Name()
		id, ok := strings.CutSuffix(name, archiveSuffix)
		if ok && paused[id] {
			continue
		}
		if ok || strings.Contains(name, tmpInfix) {
			errs = append(errs, os.Remove(filepath.Join(m.dir, name)))
		}
	}
	return errors.Join(errs...)
}

// writeSynced writes data to path durably, through a temporary file in
// the same directory renamed into place: a crash leaves the old file or
// the new one, and at worst a temporary that reconcileDir removes.
func writeSynced(path string, data []byte) error {
	tmp := fmt.Sprintf("%s%s%d", path, tmpInfix, os.Getpid())
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// PauseUnfit pauses every running session whose backend fit says may no
// longer hold it (lost its certification, say), and returns their ids:
// such a session must not run another exec there, and Reacquire refuses
// its resume until the backend may hold it again. Where the manager does
// not pause, the session ends (backend-unfit). A session busy with an
// operation is left for the next call.
func (m *Manager) PauseUnfit(ctx context.Context, fit func(backend string, c *sandbox.Claim) error) []string {
	var out []string
	for _, l := range m.snapshot() {
		if !l.op.TryLock() {
			continue
		}
		l.mu.Lock()
		running, c := l.rec.State == store.SessionRunning && !l.ended && l.sb != nil, l.rec.Claim
		l.mu.Unlock()
		if running {
			if why := fit(l.backend, &c); why != nil {
				m.log.Warn("session's backend may no longer hold it", "id", l.id, "tenant", l.tenant, "backend", l.backend, "error", why)
				out = append(out, l.id)
				if !m.canPause() {
					m.end(l, store.SessionEnded, ReasonBackendUnfit, m.now())
				} else if err := m.pause(ctx, l, ReasonBackendUnfit); err != nil {
					m.log.Error("pause a session off an unfit backend", "id", l.id, "error", err)
					m.end(l, store.SessionEnded, ReasonBackendUnfit, m.now())
				}
			}
		}
		l.op.Unlock()
	}
	return out
}
