package oci

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync"
	"time"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/sandbox"
)

// fileLimit bounds one file job: the agent only touches the workspace.
const fileLimit = 30 * time.Second

// session is a sandbox's state once Open claimed it for a session.
type session struct {
	mu     sync.Mutex // one job at a time: usage counts from each job's start
	claim  *sandbox.Invocation
	lim    sandbox.Limits // the claim's, with defaults (and a control's weakening)
	broken error          // set once a job left the agent unreachable
}

// Open implements sandbox.Session: the claim Run makes for an invocation
// (cgroup limits, disk quota, network policy), made once for the session,
// then the session's rlimits sent to the agent in a job that runs nothing,
// so that every exec inherits them and none can raise them.
func (s *Sandbox) Open(ctx context.Context, c *sandbox.Claim) error {
	if err := c.Validate(); err != nil {
		return err
	}
	inv := c.Invocation()
	if err := s.take(inv); err != nil {
		return err
	}
	lim := s.b.weaken(c.Limits.WithDefaults())
	if p := s.boot.paused; p != nil {
		switch {
		case inv.Tenant != p.rec.Tenant && s.b.weak != battery.PausedAnyTenant:
			return wrongTenant("%s sandbox %s resumes tenant %q's session", s.b.name, s.id, p.rec.Tenant)
		case lim != p.meta.Claim:
			return sandbox.Errorf(sandbox.BadInput, "limits", "%s sandbox %s resumes a session claimed with other limits", s.b.name, s.id)
		}
	}
	if err := s.begin(ctx, inv, lim, true); err != nil {
		return err
	}
	if s.boot.paused != nil {
		// The restored agent holds the session's rlimits from its first
		// claim; they cannot be raised, and lowering is not asked for.
		s.mu.Lock()
		s.sess = &session{claim: inv, lim: lim}
		s.mu.Unlock()
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, fileLimit)
	defer cancel()
	rep, err := s.client.Do(ctx, agent.Job{ID: "claim", Rlimits: s.rlimits(lim)})
	if err == nil && rep.Error != "" {
		err = fmt.Errorf("agent: %s", rep.Error)
	}
	if err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "%s: set the session's limits in %s", s.b.name, s.id)
	}
	s.mu.Lock()
	s.sess = &session{claim: inv, lim: lim}
	s.mu.Unlock()
	return nil
}

// opened returns the session Open made, locked; the caller unlocks it.
func (s *Sandbox) opened() (*session, error) {
	s.mu.Lock()
	ss, gone := s.sess, s.gone
	s.mu.Unlock()
	switch {
	case gone:
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "sandbox %s was destroyed", s.id)
	case ss == nil:
		return nil, sandbox.Errorf(sandbox.BadInput, "session", "sandbox %s holds no session (Open first)", s.id)
	}
	ss.mu.Lock()
	if ss.broken != nil {
		ss.mu.Unlock()
		return nil, sandbox.Wrap(sandbox.BackendFailure, ss.broken, "%s: session sandbox %s is unusable", s.b.name, s.id)
	}
	return ss, nil
}

// Exec implements sandbox.Session: one job through the path Run takes
// (host deadline, CPU watch, usage from the sandbox's cgroup since this
// exec began), with Sweep so that nothing it started outlives it.
func (s *Sandbox) Exec(ctx context.Context, e *sandbox.Exec) (*sandbox.Result, error) {
	ss, err := s.opened()
	if err != nil {
		return nil, err
	}
	defer ss.mu.Unlock()
	ex, err := e.Validate(ss.lim)
	if err != nil {
		return nil, err
	}
	if ex.Background {
		return nil, sandbox.Errorf(sandbox.BadInput, "background", "a background exec is started with Start (sandbox.Processes)")
	}
	lim := ss.lim
	lim.Wall, lim.Output = ex.Wall, ex.Output
	res := &sandbox.Result{ID: ex.ID, Backend: s.b.name, Accel: s.d.accel}
	if res.ID == "" {
		res.ID = sandbox.NewID()
	}
	job := agent.Job{ID: res.ID, Argv: ex.Argv, Env: s.workloadEnv(ex.Env), Dir: path.Join(workDir, ex.Dir),
		Stdin: ex.Stdin, Wall: lim.Wall, Output: lim.Output, Sweep: s.b.weak != KeepLeftovers}
	if s.b.weak == battery.NoDeadline {
		job.Wall = 0
	}
	s.base = resetUsage(s.tenant)
	done, err := s.doJob(ctx, job, lim, res, false)
	if done {
		ss.broken = fmt.Errorf("exec %s: the agent did not reply", res.ID)
		if err != nil {
			ss.broken = err
		}
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// File implements sandbox.Session: one file job, answered by the agent
// from inside the sandbox (through os.Root on the workspace, agent.FileOp),
// so it sees the session's filesystem as its execs do on every runtime —
// gVisor's Sentry caches what the host side would not see change.
func (s *Sandbox) File(ctx context.Context, op *sandbox.FileOp) (*sandbox.FileReply, error) {
	if err := op.Validate(); err != nil {
		return nil, err
	}
	ss, err := s.opened()
	if err != nil {
		return nil, err
	}
	defer ss.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, fileLimit)
	defer cancel()
	rep, err := s.client.Do(ctx, agent.Job{ID: "file-" + sandbox.NewID(), Dir: workDir, File: op})
	if err != nil {
		ss.broken = err
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "%s: file %s in %s", s.b.name, op.Op, s.id)
	}
	fr, err := agent.FileResult(op, rep)
	return fr, ss.judged(err)
}

// judged returns err, an agent's answer judged (agent.FileResult, …),
// marking the session broken if the agent answered out of bounds.
func (ss *session) judged(err error) error {
	if errors.Is(err, agent.ErrAgentFault) {
		ss.broken = err
	}
	return err
}

// KeepLeftovers is the positive control of the session rows: an exec's
// processes that left its process group are not swept at its end.
const KeepLeftovers battery.Weakness = "keep-leftovers"
