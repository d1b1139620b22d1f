package oci

import (
	"context"
	"path"
	"time"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/sandbox"
)

// Start implements sandbox.Processes: e starts as a background job in a
// session of its own inside the sandbox, held by the agent, which spares
// it in the sweep after every later exec (agent/background.go). The
// sandbox's cgroup, rlimits and network policy bound it as they bound
// every exec; its own wall limit is the session's lifetime.
func (s *Sandbox) Start(ctx context.Context, e *sandbox.Exec) (*sandbox.Process, error) {
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
	job := agent.Job{ID: ex.ID, Argv: ex.Argv, Env: s.workloadEnv(ex.Env), Dir: path.Join(workDir, ex.Dir),
		Output: ex.Output, Background: true, OpenStdin: ex.OpenStdin}
	started := time.Now()
	rep, err := s.procsJob(ctx, ss, job)
	if err != nil {
		return nil, err
	}
	p, err := agent.StartResult(ex, rep, started)
	return p, ss.judged(err)
}

// Processes implements sandbox.Processes.
func (s *Sandbox) Processes(ctx context.Context) ([]sandbox.Process, error) {
	return agent.ProcsCall(s.procs).List(ctx)
}

// Process implements sandbox.Processes.
func (s *Sandbox) Process(ctx context.Context, id string) (*sandbox.Process, error) {
	return agent.ProcsCall(s.procs).Get(ctx, id)
}

// Kill implements sandbox.Processes.
func (s *Sandbox) Kill(ctx context.Context, id string) (*sandbox.Process, error) {
	return agent.ProcsCall(s.procs).Kill(ctx, id)
}

// WriteStdin implements sandbox.StdinWriter through the agent, which
// writes without waiting (agent.ProcsWrite).
func (s *Sandbox) WriteStdin(ctx context.Context, id string, data []byte, end bool) (int, error) {
	if len(data) > sandbox.MaxStdinWrite {
		return 0, sandbox.Errorf(sandbox.BadInput, "stdin", "a write to a process's stdin is at most %d bytes", sandbox.MaxStdinWrite)
	}
	ss, err := s.opened()
	if err != nil {
		return 0, err
	}
	defer ss.mu.Unlock()
	rep, err := s.procsJob(ctx, ss, agent.Job{ID: "stdin-" + sandbox.NewID(), Procs: &agent.ProcsJob{Op: agent.ProcsWrite, ID: id, Data: data, Close: end}})
	if err != nil {
		return 0, err
	}
	n, err := agent.WriteResult(id, len(data), rep)
	return n, ss.judged(err)
}

// procs sends one Procs job and judges its answer (agent.ProcsResult).
func (s *Sandbox) procs(ctx context.Context, op agent.ProcsJob, one bool) ([]sandbox.Process, error) {
	ss, err := s.opened()
	if err != nil {
		return nil, err
	}
	defer ss.mu.Unlock()
	rep, err := s.procsJob(ctx, ss, agent.Job{ID: "procs-" + sandbox.NewID(), Procs: &op})
	if err != nil {
		return nil, err
	}
	ps, err := agent.ProcsResult(op, rep, one, ss.lim.Output)
	return ps, ss.judged(err)
}

// procsJob sends job, a Background or Procs job, which the agent answers
// without waiting on any process (a kill within its sweep limit); a lost
// agent breaks the session.
func (s *Sandbox) procsJob(ctx context.Context, ss *session, job agent.Job) (agent.Reply, error) {
	ctx, cancel := context.WithTimeout(ctx, fileLimit)
	defer cancel()
	rep, err := s.client.Do(ctx, job)
	if err != nil {
		ss.broken = err
		return rep, sandbox.Wrap(sandbox.BackendFailure, err, "%s: background job in %s", s.b.name, s.id)
	}
	return rep, nil
}
