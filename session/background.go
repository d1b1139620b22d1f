package session

import (
	"context"
	"errors"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// A background exec (sandbox.Exec.Background) is started in the session's
// turn and answered as soon as it runs: its record, running, with its pid.
// The turn is then free, and later execs and file operations run beside it;
// the sandbox's sweep after each of them spares it (sandbox.Processes). Its
// record moves to done when the sandbox reports it ended (read by
// Processes or Process), to killed when Kill ends it while it runs or its
// session ends. The sandbox holds it, ended or not, until it is killed:
// at most sandbox.MaxBackground at once.
//
// Reading or killing one goes through the session's turn, as every use of
// its sandbox does, so it waits for a foreground exec in flight.

// backgroundOf returns l's sandbox as a holder of background processes.
func backgroundOf(l *live) (sandbox.Processes, error) {
	ps, ok := l.sb.(sandbox.Processes)
	if !ok {
		return nil, sandbox.Errorf(sandbox.BadInput, "background", "backend %s cannot keep background processes", l.backend)
	}
	return ps, nil
}

// startBackground is Start for a background exec: e runs in a session of
// its own inside the sandbox, and its record (running, with its pid, or
// done at once for a command that could not start) is durable before it is
// returned.
func (m *Manager) startBackground(ctx context.Context, tenant, id string, e *sandbox.Exec) (store.Exec, error) {
	l, rec, err := m.lookup(tenant, id)
	if err != nil {
		return store.Exec{}, err
	}
	lim := rec.Claim.Limits
	if l != nil {
		lim = l.spec.Limits
	}
	ex, err := e.Validate(lim.WithDefaults())
	if err != nil {
		return store.Exec{}, err
	}
	if ex.ID == "" {
		ex.ID = sandbox.NewID()
	}
	l, ctx, err = m.use(ctx, tenant, id)
	if err != nil {
		return store.Exec{}, err
	}
	var out store.Exec
	err = func() error {
		if err := m.fresh(l, ex.ID); err != nil {
			return err
		}
		ps, err := backgroundOf(l)
		if err != nil {
			return err
		}
		p, err := ps.Start(ctx, &ex)
		if err != nil {
			return err
		}
		out = store.Exec{ID: ex.ID, Session: id, Tenant: tenant, Argv: ex.Argv, Dir: ex.Dir, Background: true, OpenStdin: ex.OpenStdin,
			Pid: p.Pid, State: store.ExecRunning, Started: m.now()}
		if !p.Running {
			out.State, out.Ended, out.Result = store.ExecDone, out.Started, processResult(l, p)
		}
		if err := m.putExec(out); err != nil {
			return sandbox.Wrap(sandbox.BackendFailure, err, "record exec")
		}
		l.mu.Lock()
		l.execs++
		if out.State == store.ExecRunning {
			if l.bg == nil {
				l.bg = map[string]store.Exec{}
			}
			l.bg[out.ID] = out
		}
		l.mu.Unlock()
		return nil
	}()
	m.done(l, err)
	return out, err
}

// Processes returns the background processes tenant's session id holds,
// oldest first: each one's record, a running one's without output.
func (m *Manager) Processes(ctx context.Context, tenant, id string) ([]store.Exec, error) {
	l, ctx, err := m.use(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	out := []store.Exec{}
	err = func() error {
		ps, err := backgroundOf(l)
		if err != nil {
			return err
		}
		list, err := ps.Processes(ctx)
		if err != nil {
			return err
		}
		for _, p := range list {
			if !p.Running && m.running(l, p.ID) {
				// Ended since it was last read: its record takes its
				// final output, which a list does not carry.
				full, err := ps.Process(ctx, p.ID)
				if err != nil {
					return err
				}
				p = *full
			}
			rec, err := m.note(l, &p, false)
			if err != nil {
				return err
			}
			out = append(out, rec)
		}
		return nil
	}()
	m.done(l, err)
	return out, err
}

// Process returns background exec eid of tenant's session id with its
// output so far; once the sandbox no longer holds it (killed, or its
// session ended), its final record.
func (m *Manager) Process(ctx context.Context, tenant, id, eid string) (store.Exec, error) {
	l, _, err := m.lookup(tenant, id)
	if err != nil {
		return store.Exec{}, err
	}
	if l == nil { // ended: its records are final
		return m.backgroundRecord(id, eid, tenant)
	}
	l, ctx, err = m.use(ctx, tenant, id)
	if err != nil {
		return store.Exec{}, err
	}
	var out store.Exec
	err = func() error {
		ps, err := backgroundOf(l)
		if err != nil {
			return err
		}
		p, err := ps.Process(ctx, eid)
		if errors.Is(err, sandbox.NotFound) {
			out, err = m.backgroundRecord(id, eid, tenant)
			return err
		}
		if err != nil {
			return err
		}
		out, err = m.note(l, p, true)
		return err
	}()
	m.done(l, err)
	return out, err
}

// backgroundRecord is the stored record of background exec eid; any other
// exec id is NotFound.
func (m *Manager) backgroundRecord(id, eid, tenant string) (store.Exec, error) {
	rec, err := m.st.GetExec(id, eid)
	switch {
	case errors.Is(err, store.ErrNotFound) || err == nil && (rec.Tenant != tenant || !rec.Background):
		return store.Exec{}, processNotFound(id, eid)
	case err != nil:
		return store.Exec{}, sandbox.Wrap(sandbox.BackendFailure, err, "read exec")
	}
	return rec, nil
}

// processNotFound is the answer for an id that is not a background exec of
// the session.
func processNotFound(id, eid string) error {
	return sandbox.Errorf(sandbox.NotFound, "exec", "no background process %s in session %s", eid, id)
}

// Kill kills background exec eid of tenant's session id, with every
// process of its session inside the sandbox, and returns its final record:
// killed if it was running, done if it had ended on its own. One the
// sandbox does not hold (never started, already killed) is NotFound.
func (m *Manager) Kill(ctx context.Context, tenant, id, eid string) (store.Exec, error) {
	l, ctx, err := m.use(ctx, tenant, id)
	if err != nil {
		return store.Exec{}, err
	}
	var out store.Exec
	err = func() error {
		ps, err := backgroundOf(l)
		if err != nil {
			return err
		}
		p, err := ps.Kill(ctx, eid)
		if errors.Is(err, sandbox.NotFound) {
			return processNotFound(id, eid)
		}
		if err != nil {
			return err
		}
		out, err = m.note(l, p, true)
		return err
	}()
	m.done(l, err)
	return out, err
}

// running reports whether l's background exec eid is recorded as running.
func (m *Manager) running(l *live, eid string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.bg[eid]
	return ok
}

// note merges what the sandbox reported of p into its exec's record: an
// ended p ends the record durably (killed if p was killed running, else
// done); a running one is returned as it was begun, with its output so
// far when withOutput.
func (m *Manager) note(l *live, p *sandbox.Process, withOutput bool) (store.Exec, error) {
	l.mu.Lock()
	rec, ok := l.bg[p.ID]
	l.mu.Unlock()
	if !ok { // ended before: its record is final
		r, err := m.st.GetExec(l.id, p.ID)
		if err != nil {
			return store.Exec{}, sandbox.Wrap(sandbox.BackendFailure, err, "read exec %s", p.ID)
		}
		return r, nil
	}
	if p.Running {
		if withOutput {
			rec.Result = processResult(l, p)
		}
		return rec, nil
	}
	rec.State, rec.Ended, rec.Result = store.ExecDone, m.now(), processResult(l, p)
	if p.Killed {
		rec.State = store.ExecKilled
	}
	if err := m.putExec(rec); err != nil {
		return store.Exec{}, sandbox.Wrap(sandbox.BackendFailure, err, "record exec")
	}
	l.mu.Lock()
	delete(l.bg, p.ID)
	l.mu.Unlock()
	return rec, nil
}

// processResult is p as an exec's result.
func processResult(l *live, p *sandbox.Process) *sandbox.Result {
	res := &sandbox.Result{ID: p.ID, ExitCode: p.ExitCode, Signal: p.Signal, Stdout: p.Stdout, Stderr: p.Stderr,
		StdoutTruncated: p.StdoutTruncated, StderrTruncated: p.StderrTruncated, Backend: l.backend}
	res.Timings.Started, res.Timings.Finished = p.Started, p.Ended
	if !p.Ended.IsZero() {
		res.Usage.Wall = p.Ended.Sub(p.Started)
	}
	if p.Killed {
		res.Class, res.Error = sandbox.Killed, "killed by request"
	}
	return res
}

// endBackground records l's running background execs as killed with their
// session (its op held, its sandbox given back: nothing of them is left).
func (m *Manager) endBackground(l *live, why string) {
	l.mu.Lock()
	bg := l.bg
	l.bg = nil
	l.mu.Unlock()
	for _, rec := range bg {
		rec.State, rec.Ended = store.ExecKilled, m.now()
		rec.Result = &sandbox.Result{ID: rec.ID, ExitCode: 137, Signal: "killed", Backend: l.backend,
			Class: sandbox.Killed, Error: why}
		if err := m.putExec(rec); err != nil {
			m.log.Error("record background exec end", "session", l.id, "exec", rec.ID, "error", err)
		}
	}
}

// putExec writes rec and waits until it is durable.
func (m *Manager) putExec(rec store.Exec) error {
	done := make(chan error, 1)
	m.st.PutExec(rec, func(err error) { done <- err })
	return <-done
}

// WriteStdin writes data to the stdin of tenant's background exec eid
// (started with OpenStdin) in session id, as far as its pipe takes it now,
// and returns how much it wrote; with end, once all of it is written, the
// stdin is closed. It goes through the session's turn, as every use of the
// sandbox does, and resumes a paused session. An exec the sandbox does
// not hold is NotFound; a closed stdin a Conflict, which changes nothing.
func (m *Manager) WriteStdin(ctx context.Context, tenant, id, eid string, data []byte, end bool) (int, error) {
	if len(data) > sandbox.MaxStdinWrite {
		return 0, sandbox.Errorf(sandbox.BadInput, "stdin", "a write to a process's stdin is at most %d bytes", sandbox.MaxStdinWrite)
	}
	l, ctx, err := m.use(ctx, tenant, id)
	if err != nil {
		return 0, err
	}
	n := 0
	err = func() error {
		w, ok := l.sb.(sandbox.StdinWriter)
		if !ok {
			return sandbox.Errorf(sandbox.BadInput, "open_stdin", "backend %s cannot stream a process's stdin", l.backend)
		}
		n, err = w.WriteStdin(ctx, eid, data, end)
		if errors.Is(err, sandbox.NotFound) {
			return processNotFound(id, eid)
		}
		return err
	}()
	m.done(l, err)
	return n, err
}
