package session

import (
	"context"
	"errors"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
	"github.com/wovyr/wovyr/stream"
)

// run is one exec in progress: its live output and, once it has ended, its
// result. done is closed when res and err are set; the record may still be
// on its way to the store, and until it is durable the run stays in its
// session's runs, so that a reader always finds the exec in one place or
// the other.
type run struct {
	rec  store.Exec // as begun
	out  *stream.Log
	done chan struct{}
	res  *sandbox.Result
	err  error
}

// ExecWatch is how a reader follows one exec: Live while it runs (its
// chunks so far, then more as they come), else the exec's record, from
// which its output replays (sandbox.Replay of Record.Chunks).
type ExecWatch struct {
	Live   *stream.Log // nil once the exec's end is durable
	Record store.Exec  // the record as begun when Live is set; else the final one
}

// execNotFound is the answer for an exec id the session does not have.
func execNotFound(id, eid string) error {
	return sandbox.Errorf(sandbox.NotFound, "exec", "no exec %s in session %s", eid, id)
}

// Start begins e in tenant's session id and returns its record as begun,
// without waiting for the exec to end: ctx bounds only the wait for the
// session's operation in flight. The exec runs in the session's turn (one
// at a time), its output live in a stream.Log (Watch), its end recorded.
// An exec id the session has used is a Conflict; a bad exec BadInput,
// nothing recorded. A background exec (e.Background) is answered once it
// runs, its record running with its pid (background.go).
func (m *Manager) Start(ctx context.Context, tenant, id string, e *sandbox.Exec) (store.Exec, error) {
	if e.Background {
		return m.startBackground(ctx, tenant, id, e)
	}
	r, err := m.start(ctx, tenant, id, e, true)
	if err != nil {
		return store.Exec{}, err
	}
	return r.rec, nil
}

// start begins e; begun records its start durably too (Start: the caller
// has only the id to follow, so a crash must leave an interrupted record,
// never a missing one). Exec's caller waits for the result on its request,
// which a crash fails anyway, and its end alone is recorded: a start
// record cost an exec round trip ≈ 1 ms more on this machine
// (BenchmarkSessionExec).
func (m *Manager) start(ctx context.Context, tenant, id string, e *sandbox.Exec, begun bool) (*run, error) {
	l, rec, err := m.lookup(tenant, id)
	if err != nil {
		return nil, err
	}
	lim := rec.Claim.Limits
	if l != nil {
		lim = l.spec.Limits
	}
	ex, err := e.Validate(lim.WithDefaults())
	if err != nil {
		return nil, err
	}
	if ex.ID == "" {
		ex.ID = sandbox.NewID()
	}
	if l != nil {
		// A running exec's id is refused before waiting for the turn
		// (which may be that exec's); the store is read in the turn.
		l.mu.Lock()
		_, running := l.runs[ex.ID]
		l.mu.Unlock()
		if running {
			err := execTaken(l.id, ex.ID)
			return nil, err
		}
	}
	l, opCtx, err := m.use(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	if err := m.fresh(l, ex.ID); err != nil {
		m.done(l, nil)
		return nil, err
	}
	r := &run{out: stream.New(), done: make(chan struct{}),
		rec: store.Exec{ID: ex.ID, Session: id, Tenant: tenant, Argv: ex.Argv, Dir: ex.Dir, State: store.ExecRunning, Started: m.now()}}
	l.mu.Lock()
	l.runs[ex.ID] = r
	l.mu.Unlock()
	if begun {
		m.st.BeginExec(r.rec, func(err error) {
			if err != nil {
				m.log.Error("record exec", "session", id, "exec", ex.ID, "error", err)
			}
		})
	}
	go m.exec(l, opCtx, r, &ex)
	return r, nil
}

// execTaken is the Conflict for an exec id the session has used.
func execTaken(id, eid string) error {
	return sandbox.Errorf(sandbox.Conflict, "id", "session %s already has an exec %s", id, eid)
}

// fresh refuses an exec id that l has used, running or recorded.
func (m *Manager) fresh(l *live, eid string) error {
	l.mu.Lock()
	_, running := l.runs[eid]
	l.mu.Unlock()
	_, err := m.st.GetExec(l.id, eid)
	switch {
	case running || err == nil:
		return execTaken(l.id, eid)
	case !errors.Is(err, store.ErrNotFound):
		return sandbox.Wrap(sandbox.BackendFailure, err, "read exec")
	}
	return nil
}

// exec runs r in l's turn (op held by start) and records its end.
func (m *Manager) exec(l *live, ctx context.Context, r *run, e *sandbox.Exec) {
	res, err := l.sb.Exec(sandbox.WithOutput(ctx, r.out.Add), e)
	live := r.out.Chunks()
	final := r.rec
	final.Ended = m.now()
	if err == nil {
		l.mu.Lock()
		l.execs++
		l.mu.Unlock()
		final.State, final.Result = store.ExecDone, res
	} else {
		// A failed exec's record keeps what it streamed before it failed.
		fr := &sandbox.Result{ID: r.rec.ID, ExitCode: -1, Class: sandbox.ClassOf(err), Error: sandbox.Public(err)}
		for _, c := range live {
			if c.Stream == sandbox.Stderr {
				fr.Stderr = append(fr.Stderr, c.Data...)
			} else {
				fr.Stdout = append(fr.Stdout, c.Data...)
			}
		}
		final.State, final.Result = store.ExecFailed, fr
	}
	marks, ok := sandbox.OutputMarks(live, final.Result)
	if !ok {
		m.log.Warn("exec output streamed unlike its result", "session", l.id, "exec", r.rec.ID, "backend", l.backend)
	}
	final.Chunks = marks
	r.res, r.err = res, err
	// Queued before the turn ends: Close waits for the turn, so the
	// store is still open for it.
	m.st.PutExec(final, func(err error) {
		if err != nil {
			m.log.Error("record exec end", "session", l.id, "exec", r.rec.ID, "error", err)
		}
		l.mu.Lock()
		delete(l.runs, r.rec.ID)
		l.mu.Unlock()
		r.out.End()
	})
	m.done(l, err)
	close(r.done)
}

// Exec runs e in tenant's session id and returns its result when it ends.
// An ended session is a Conflict; a bad exec BadInput, and the session
// goes on.
func (m *Manager) Exec(ctx context.Context, tenant, id string, e *sandbox.Exec) (*sandbox.Result, error) {
	if e.Background {
		return nil, sandbox.Errorf(sandbox.BadInput, "background", "a background exec has no result to wait for: start it (Start)")
	}
	r, err := m.start(ctx, tenant, id, e, false)
	if err != nil {
		return nil, err
	}
	<-r.done
	return r.res, r.err
}

// Watch returns how to follow exec eid of tenant's session id (ended
// sessions too, until purged). An id the tenant does not own, or an exec
// the session does not have, is NotFound.
func (m *Manager) Watch(tenant, id, eid string) (ExecWatch, error) {
	l, _, err := m.lookup(tenant, id)
	if err != nil {
		return ExecWatch{}, err
	}
	if l != nil {
		l.mu.Lock()
		r := l.runs[eid]
		l.mu.Unlock()
		if r != nil {
			return ExecWatch{Live: r.out, Record: r.rec}, nil
		}
	}
	rec, err := m.st.GetExec(id, eid)
	switch {
	case errors.Is(err, store.ErrNotFound) || err == nil && rec.Tenant != tenant:
		return ExecWatch{}, execNotFound(id, eid)
	case err != nil:
		return ExecWatch{}, sandbox.Wrap(sandbox.BackendFailure, err, "read exec")
	}
	return ExecWatch{Record: rec}, nil
}

// GetExec returns exec eid of tenant's session id: its record, live or
// final.
func (m *Manager) GetExec(tenant, id, eid string) (store.Exec, error) {
	w, err := m.Watch(tenant, id, eid)
	return w.Record, err
}
