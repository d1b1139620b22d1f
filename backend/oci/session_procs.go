package oci

import (
	"context"
	"fmt"
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
	switch {
	case rep.Error != "" && rep.Class == sandbox.BadInput:
		return nil, &sandbox.Error{Class: sandbox.BadInput, Field: "background", Msg: rep.Error}
	case rep.Error != "":
		// Not started (command not found): reported as a foreground
		// exec's, ended at once and not held.
		stderr, cut := sandbox.AppendNotStarted(nil, rep.Error, ex.Output)
		return &sandbox.Process{ID: ex.ID, Argv: ex.Argv, Started: started, Ended: time.Now(), ExitCode: 127,
			Stderr: stderr, StderrTruncated: cut}, nil
	case rep.Pid <= 0:
		ss.broken = fmt.Errorf("background exec %s: the agent answered without a pid", ex.ID)
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "%s: the sandbox's agent started %s without a pid", s.b.name, ex.ID)
	}
	return &sandbox.Process{ID: ex.ID, Pid: rep.Pid, Argv: ex.Argv, Started: started, Running: true}, nil
}

// Processes implements sandbox.Processes.
func (s *Sandbox) Processes(ctx context.Context) ([]sandbox.Process, error) {
	ps, err := s.procs(ctx, agent.ProcsJob{Op: agent.ProcsList}, false)
	if ps == nil && err == nil {
		ps = []sandbox.Process{}
	}
	return ps, err
}

// Process implements sandbox.Processes.
func (s *Sandbox) Process(ctx context.Context, id string) (*sandbox.Process, error) {
	ps, err := s.procs(ctx, agent.ProcsJob{Op: agent.ProcsGet, ID: id}, true)
	if err != nil {
		return nil, err
	}
	return &ps[0], nil
}

// Kill implements sandbox.Processes.
func (s *Sandbox) Kill(ctx context.Context, id string) (*sandbox.Process, error) {
	ps, err := s.procs(ctx, agent.ProcsJob{Op: agent.ProcsKill, ID: id}, true)
	if err != nil {
		return nil, err
	}
	return &ps[0], nil
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
	switch {
	case err != nil:
		return 0, err
	case rep.Written < 0 || rep.Written > len(data):
		ss.broken = fmt.Errorf("stdin write: the agent answered %d of %d bytes", rep.Written, len(data))
		return 0, sandbox.Errorf(sandbox.BackendFailure, "", "%s: the sandbox's agent answered a stdin write out of bounds", s.b.name)
	case rep.Error == "":
		return rep.Written, nil
	case rep.Class == sandbox.NotFound:
		return 0, sandbox.Errorf(sandbox.NotFound, "process", "no background process %s in this session", id)
	case rep.Class == sandbox.Conflict:
		return rep.Written, &sandbox.Error{Class: sandbox.Conflict, Field: "process", Msg: rep.Error}
	}
	ss.broken = fmt.Errorf("stdin write %s: %s", id, rep.Error)
	return 0, sandbox.Errorf(sandbox.BackendFailure, "", "%s: stdin write in %s: %s", s.b.name, s.id, rep.Error)
}

// procs sends one Procs job and judges its answer: at most
// sandbox.MaxBackground processes, exactly one for get and kill (one
// set), each one's output within the session's cap (the agent is the
// tenant's neighbour). An id the agent does not hold is NotFound.
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
	if rep.Error != "" {
		switch rep.Class {
		case sandbox.NotFound:
			return nil, sandbox.Errorf(sandbox.NotFound, "process", "no background process %s in this session", op.ID)
		case sandbox.BadInput:
			return nil, &sandbox.Error{Class: sandbox.BadInput, Field: "process", Msg: rep.Error}
		}
		ss.broken = fmt.Errorf("background %s %s: %s", op.Op, op.ID, rep.Error)
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "%s: sandbox %s may hold leftover processes: %s", s.b.name, s.id, rep.Error)
	}
	bad := len(rep.Procs) > sandbox.MaxBackground || one && (len(rep.Procs) != 1 || rep.Procs[0].ID != op.ID)
	for _, p := range rep.Procs {
		bad = bad || sandbox.CheckReplyOutput("the sandbox's agent", p.Stdout, p.Stderr, ss.lim.Output) != nil
	}
	if bad {
		ss.broken = fmt.Errorf("background %s: the agent answered out of bounds", op.Op)
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "%s: the sandbox's agent answered a background %s out of bounds", s.b.name, op.Op)
	}
	return rep.Procs, nil
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
