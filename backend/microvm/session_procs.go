package microvm

import (
	"context"
	"time"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/sandbox"
)

// Start implements sandbox.Processes: e starts as a background job inside
// the guest, held by its agent, in the job cgroup with the session's
// limits and the rlimits every exec gets; the sweep after every later
// exec spares it.
func (s *vmSandbox) Start(ctx context.Context, e *sandbox.Exec) (*sandbox.Process, error) {
	ss, err := s.opened()
	if err != nil {
		return nil, err
	}
	defer ss.mu.Unlock()
	if !e.Background {
		return nil, sandbox.Errorf(sandbox.BadInput, "background", "Start takes a background exec")
	}
	ex, err := e.Validate(ss.lim)
	if err != nil {
		return nil, err
	}
	if ex.ID == "" {
		ex.ID = sandbox.NewID()
	}
	lim := ss.lim
	lim.Wall, lim.Output = 0, ex.Output
	job := s.sessionJob(ex.ID, ex, lim)
	job.Background, job.OpenStdin = true, ex.OpenStdin
	started := time.Now()
	rep, err := s.controlJob(ctx, ss, job)
	if err != nil {
		return nil, err
	}
	p, err := agent.StartResult(ex, rep, started)
	return p, ss.judged(err)
}

// Processes implements sandbox.Processes.
func (s *vmSandbox) Processes(ctx context.Context) ([]sandbox.Process, error) {
	return agent.ProcsCall(s.procs).List(ctx)
}

// Process implements sandbox.Processes.
func (s *vmSandbox) Process(ctx context.Context, id string) (*sandbox.Process, error) {
	return agent.ProcsCall(s.procs).Get(ctx, id)
}

// Kill implements sandbox.Processes.
func (s *vmSandbox) Kill(ctx context.Context, id string) (*sandbox.Process, error) {
	return agent.ProcsCall(s.procs).Kill(ctx, id)
}

// WriteStdin implements sandbox.StdinWriter through the guest's agent,
// which writes without waiting (agent.ProcsWrite).
func (s *vmSandbox) WriteStdin(ctx context.Context, id string, data []byte, end bool) (int, error) {
	if len(data) > sandbox.MaxStdinWrite {
		return 0, sandbox.Errorf(sandbox.BadInput, "stdin", "a write to a process's stdin is at most %d bytes", sandbox.MaxStdinWrite)
	}
	ss, err := s.opened()
	if err != nil {
		return 0, err
	}
	defer ss.mu.Unlock()
	rep, err := s.controlJob(ctx, ss, agent.VMJob{Job: agent.Job{ID: "stdin-" + sandbox.NewID(),
		Procs: &agent.ProcsJob{Op: agent.ProcsWrite, ID: id, Data: data, Close: end}}})
	if err != nil {
		return 0, err
	}
	n, err := agent.WriteResult(id, len(data), rep)
	return n, ss.judged(err)
}

// procs sends one Procs job and judges its answer (agent.ProcsResult).
func (s *vmSandbox) procs(ctx context.Context, op agent.ProcsJob, one bool) ([]sandbox.Process, error) {
	ss, err := s.opened()
	if err != nil {
		return nil, err
	}
	defer ss.mu.Unlock()
	rep, err := s.controlJob(ctx, ss, agent.VMJob{Job: agent.Job{ID: "procs-" + sandbox.NewID(), Procs: &op}})
	if err != nil {
		return nil, err
	}
	ps, err := agent.ProcsResult(op, rep, one, ss.lim.Output)
	return ps, ss.judged(err)
}
