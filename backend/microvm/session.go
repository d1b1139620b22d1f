package microvm

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

// A microVM holds a session as it holds a warm invocation: its guest's
// agent serves one job at a time on the control port, and a session's are
// execs, file operations and background processes, answered inside the
// guest as a sandbox's agent answers them on the OCI tiers (agent.Serve).
// The claim is made once, at Open: the VM was sized for the session's
// limits, the job cgroup inside it bounds all of its processes together
// (each job carries the same limits, which the guest writes only when they
// change), and its egress slot holds the session's network policy for the
// session's whole life. An exec is swept at its end (agent sweepVM), its
// background processes spared. A session's VM pauses whole (pause.go):
// its processes come back with it.

// fileLimit bounds one file or procs job: the guest only touches the
// workspace and answers without waiting on any process.
const fileLimit = 30 * time.Second

// vmSession is a sandbox's state once Open claimed it for a session.
type vmSession struct {
	mu     sync.Mutex // one job at a time
	claim  *sandbox.Invocation
	lim    sandbox.Limits // the claim's, with defaults
	broken error          // set once a job left the guest unreachable or untrusted
}

// Open implements sandbox.Session.
func (s *vmSandbox) Open(ctx context.Context, c *sandbox.Claim) error {
	if err := c.Validate(); err != nil {
		return err
	}
	inv := c.Invocation()
	if err := s.b.checkInvocation(inv); err != nil {
		return err
	}
	if s.b.diskName(c.Image) != s.b.diskName(s.tmpl.Image) {
		return sandbox.Errorf(sandbox.BadInput, "image", "sandbox was prepared for image %q, not %q", s.tmpl.Image, c.Image)
	}
	lim := c.Limits.WithDefaults()
	switch {
	case len(s.tmpl.GPUs) > 0:
		return sandbox.Errorf(sandbox.BadInput, "resources.gpu", "sessions do not take GPUs yet")
	case lim.Memory > s.limit.Memory:
		return sandbox.Errorf(sandbox.Unenforceable, "limits.memory", "session needs %d bytes; this VM was sized for %d", lim.Memory, s.limit.Memory)
	case lim.Disk > s.limit.Disk:
		return sandbox.Errorf(sandbox.Unenforceable, "limits.disk", "session needs %d bytes of disk; this VM has %d", lim.Disk, s.limit.Disk)
	}
	s.mu.Lock()
	if err := s.openable(inv.Tenant, lim); err != nil {
		s.mu.Unlock()
		return err
	}
	s.st, s.owner = running, inv.Tenant // nothing else claims it meanwhile
	s.mu.Unlock()
	err := s.claimVM(ctx, inv)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.st = spent
		return err
	}
	if s.st != running {
		return sandbox.Errorf(sandbox.BackendFailure, "", "microvm sandbox %s was destroyed while it opened", s.id)
	}
	s.st, s.sess = held, &vmSession{claim: inv, lim: lim}
	return nil
}

// openable says whether a session of tenant, limited by lim, may claim s
// (s.mu held).
func (s *vmSandbox) openable(tenant string, lim sandbox.Limits) error {
	switch {
	case s.st != prepared:
		return sandbox.Errorf(sandbox.BackendFailure, "", "microvm sandbox %s is not ready (state %d): a sandbox holds one session or runs one invocation", s.id, s.st)
	case s.owner != "" && tenant != s.owner && s.b.cfg.weak != battery.PausedAnyTenant:
		return wrongTenant("microvm sandbox %s resumes tenant %q's session", s.id, s.owner)
	case s.resumed != nil && lim != *s.resumed:
		return sandbox.Errorf(sandbox.BadInput, "limits", "microvm sandbox %s resumes a session claimed with other limits", s.id)
	case s.owner != "" && s.resumed == nil:
		return sandbox.Errorf(sandbox.BadInput, "session", "microvm sandbox %s resumes a paused invocation, not a session", s.id)
	}
	return nil
}

// claimVM makes s's VM the session's: booted now if it was prepared
// one-shot, its egress slot given the session's policy.
func (s *vmSandbox) claimVM(ctx context.Context, inv *sandbox.Invocation) error {
	if s.m == nil {
		if s.b.cfg.Network != nil {
			var err error
			if s.net, err = s.b.newVMNet(ctx); err != nil {
				return err
			}
		}
		if err := s.bootWarm(ctx, nil); err != nil {
			return err
		}
		s.warm = true
	}
	if s.net != nil {
		return s.net.apply(ctx, inv)
	}
	return nil
}

// opened returns the session Open made, locked; the caller unlocks it.
func (s *vmSandbox) opened() (*vmSession, error) {
	s.mu.Lock()
	ss, st := s.sess, s.st
	s.mu.Unlock()
	switch {
	case ss == nil:
		return nil, sandbox.Errorf(sandbox.BadInput, "session", "microvm sandbox %s holds no session (Open first)", s.id)
	case st == destroyed:
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "microvm sandbox %s was destroyed", s.id)
	case st != held:
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "microvm sandbox %s holds no live session (state %d)", s.id, st)
	}
	ss.mu.Lock()
	if ss.broken != nil {
		ss.mu.Unlock()
		return nil, sandbox.Wrap(sandbox.BackendFailure, ss.broken, "microvm: session sandbox %s is unusable", s.id)
	}
	return ss, nil
}

// judged returns err, a guest's answer judged (agent.FileResult, …),
// marking the session broken if the guest answered out of bounds.
func (ss *vmSession) judged(err error) error {
	if errors.Is(err, agent.ErrAgentFault) {
		ss.broken = err
	}
	return err
}

// Exec implements sandbox.Session: one job through the path a warm Run
// takes (warmExec), with Sweep.
func (s *vmSandbox) Exec(ctx context.Context, e *sandbox.Exec) (*sandbox.Result, error) {
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
	res := &sandbox.Result{ID: ex.ID, Backend: s.b.Name(), Accel: string(s.p.accel)}
	if res.ID == "" {
		res.ID = sandbox.NewID()
	}
	job := s.sessionJob(res.ID, ex, lim)
	job.Stdin, job.Sweep = ex.Stdin, true
	lost, err := s.warmExec(ctx, job, lim, res)
	if lost {
		ss.broken = fmt.Errorf("exec %s: the guest did not reply within bounds", res.ID)
		if err != nil {
			ss.broken = err
		}
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// sessionJob is the guest's job for ex, under the session's limits lim.
func (s *vmSandbox) sessionJob(id string, ex sandbox.Exec, lim sandbox.Limits) agent.VMJob {
	job := s.b.vmJob(&sandbox.Invocation{ID: id, Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: ex.Argv, Env: ex.Env}}, lim)
	job.Dir = path.Join(agent.GuestWorkDir, ex.Dir)
	return job
}

// File implements sandbox.Session: one file job, answered by the guest's
// agent through os.Root on the workspace (agent.FileOp).
func (s *vmSandbox) File(ctx context.Context, op *sandbox.FileOp) (*sandbox.FileReply, error) {
	if err := op.Validate(); err != nil {
		return nil, err
	}
	ss, err := s.opened()
	if err != nil {
		return nil, err
	}
	defer ss.mu.Unlock()
	rep, err := s.controlJob(ctx, ss, agent.VMJob{Job: agent.Job{ID: "file-" + sandbox.NewID(), Dir: agent.GuestWorkDir, File: op}})
	if err != nil {
		return nil, err
	}
	fr, err := agent.FileResult(op, rep)
	return fr, ss.judged(err)
}

// controlJob sends job, a File, Background or Procs job, which the guest
// answers without waiting on any process; a guest that does not answer
// within fileLimit, or out of the protocol, breaks the session (and its
// VM is killed: nothing more can be trusted to reach it in order).
func (s *vmSandbox) controlJob(ctx context.Context, ss *vmSession, job agent.VMJob) (agent.Reply, error) {
	deadline := time.Now().Add(fileLimit)
	stop := context.AfterFunc(ctx, func() { s.conn.SetDeadline(time.Now()) })
	defer stop()
	var rep agent.VMReply
	// A file reply carries at most MaxFileBytes (base64 in JSON), a procs
	// one MaxBackground capped outputs.
	limit := 2*sandbox.MaxFileBytes + int64(sandbox.MaxBackground)*4*ss.lim.Output + 1<<20
	err := roundTrip(s.conn, deadline, job, &rep, limit)
	switch {
	case err == nil && rep.ID != job.ID:
		err = fmt.Errorf("guest replied for %q, want %q", rep.ID, job.ID)
	case err == nil && rep.Setup != "":
		err = fmt.Errorf("guest setup: %s", rep.Setup)
	}
	if err != nil {
		ss.broken = err
		s.m.Kill()
		return agent.Reply{}, sandbox.Wrap(sandbox.BackendFailure, err, "microvm: %s job in sandbox %s", jobKind(job), s.id)
	}
	return rep.Reply, nil
}

func jobKind(job agent.VMJob) string {
	switch {
	case job.File != nil:
		return "file " + string(job.File.Op)
	case job.Procs != nil:
		return "background " + job.Procs.Op
	}
	return "background start"
}

var (
	_ sandbox.Session     = (*vmSandbox)(nil)
	_ sandbox.Processes   = (*vmSandbox)(nil)
	_ sandbox.StdinWriter = (*vmSandbox)(nil)
)
