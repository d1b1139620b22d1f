package microvm

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/vmm"
)

// warmGrace is what the host waits beyond an invocation's wall limit for a
// warm guest's reply before it kills the VM.
const warmGrace = 5 * time.Second

// warmSpec is the spec of a warm VM, booted or restored: a clone's must
// match its golden's device for device.
func (s *vmSandbox) warmSpec() *vmm.Spec {
	spec := s.b.spec(s.p, s.p.accel, "vm-"+s.id, agent.ModeWarm, s.b.guestRAM(s.limit.Memory))
	spec.UID, spec.GID = s.uid, s.gid
	spec.Disks = []vmm.Disk{
		{Path: s.root, Serial: agent.SerialRoot, ReadOnly: true},
		{Path: s.scratch(), Serial: agent.SerialScratch},
	}
	spec.Ports = []vmm.Port{{Name: agent.PortControl}}
	spec.Control = true // a tenant's warm VM can pause (pause.go)
	if s.net != nil {
		s.net.attach(spec)
	}
	return spec
}

// bootDeadline is when a VM that is booting or restoring must answer.
func (s *vmSandbox) bootDeadline(ctx context.Context) time.Time {
	deadline := time.Now().Add(s.b.cfg.bootTimeout(s.p.accel))
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	return deadline
}

// bootWarm boots the VM sized by the template and waits until its agent
// answers a ping on the control port: ready means answered, not started.
// With ram, guest RAM lives in that memfd, shared: a golden capture.
func (s *vmSandbox) bootWarm(ctx context.Context, ram *os.File) error {
	spec := s.warmSpec()
	spec.RAM, spec.SharedRAM = ram, ram != nil
	m, err := s.b.cfg.VMM.Start(ctx, spec)
	if err != nil {
		return err
	}
	conn := m.Port(agent.PortControl)
	deadline := s.bootDeadline(ctx)
	var rep agent.VMReply
	err = roundTrip(conn, deadline, agent.VMJob{Job: agent.Job{ID: "ready"}}, &rep, 1<<20)
	if err == nil && rep.ID != "ready" {
		err = fmt.Errorf("ping answered for %q", rep.ID)
	}
	if err == nil && rep.Setup != "" {
		err = fmt.Errorf("guest setup: %s", rep.Setup)
	}
	if err != nil {
		m.Kill()
		return sandbox.Wrap(sandbox.BackendFailure, err, "warm VM %s did not become ready; console: %s", s.id, tail(m.Console(), 1024))
	}
	if err := s.warmUp(conn, deadline); err != nil {
		m.Kill()
		return err
	}
	s.m, s.conn, s.readyAt = m, conn, rep.Boot
	return nil
}

// warmUp runs a no-op exec before any tenant: the first exec pays for
// translating the kernel's exec path and paging in the root disk, and the
// first job with limits for moving the agent into the job cgroup (hundreds
// of ms under TCG, and again in every clone: the translation cache is the
// VMM process's, not the guest's). It runs with the template's limits, as
// a tenant's job would. Its outcome does not matter. Then the template's
// own warm-up, if it declares one, which must succeed: its page cache (an
// interpreter's modules read in) is what every golden of it keeps.
func (s *vmSandbox) warmUp(conn net.Conn, deadline time.Time) error {
	var rep agent.VMReply
	job := s.b.vmJob(&sandbox.Invocation{ID: "warmup", Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"true"}}}, s.limit)
	if err := roundTrip(conn, deadline, job, &rep, 1<<20); err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "warm VM %s failed its warm-up job", s.id)
	}
	if s.warmup == nil {
		return nil
	}
	rep = agent.VMReply{}
	job = s.b.vmJob(&sandbox.Invocation{ID: "warmup-template", Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: s.warmup}}, s.limit)
	if err := roundTrip(conn, deadline, job, &rep, 1<<20); err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "warm VM %s failed its template's warm-up", s.id)
	}
	if rep.ExitCode != 0 || rep.Error != "" {
		return sandbox.Errorf(sandbox.BackendFailure, "", "template %s: warm-up %q exited %d: %s%s", s.tmpl.Image, s.warmup, rep.ExitCode, rep.Error, tail(rep.Stderr, 512))
	}
	return nil
}

// runWarm sends inv to the warm VM's agent. The host's deadline is the
// wall limit plus warmGrace; a guest that has not answered by then is
// killed and the invocation classed Timeout.
func (s *vmSandbox) runWarm(ctx context.Context, inv *sandbox.Invocation) (*sandbox.Result, error) {
	l := inv.Limits.WithDefaults()
	if l.Memory > s.limit.Memory {
		return nil, sandbox.Errorf(sandbox.Unenforceable, "limits.memory", "invocation needs %d bytes; this warm VM was sized for %d", l.Memory, s.limit.Memory)
	}
	if l.Disk > s.limit.Disk {
		return nil, sandbox.Errorf(sandbox.Unenforceable, "limits.disk", "invocation needs %d bytes of disk; this warm VM has %d", l.Disk, s.limit.Disk)
	}
	if s.net != nil {
		if err := s.net.apply(ctx, inv); err != nil {
			return nil, err
		}
	}
	res := &sandbox.Result{ID: inv.ID, Backend: s.b.Name(), Accel: string(s.p.accel)}
	if _, err := s.warmExec(ctx, s.b.vmJob(inv, l), l, res); err != nil {
		return nil, err
	}
	return res, nil
}

// warmExec sends job to the warm VM's agent and fills in res from its
// reply. A caller that watches the output live (sandbox.WithOutput) gets
// the guest's pieces as they come, and the result's output is built from
// them, held to the job's cap here, so the stream and the record agree.
// The host's deadline is the wall limit plus warmGrace; a guest that has
// not answered by then is killed and the job classed Timeout (or Killed,
// if ctx ended first). lost reports a VM that can take no further job:
// killed, or its agent out of the protocol.
func (s *vmSandbox) warmExec(ctx context.Context, job agent.VMJob, l sandbox.Limits, res *sandbox.Result) (lost bool, err error) {
	var live *sandbox.Collector
	var forward func(agent.Output)
	if fn := sandbox.OutputOf(ctx); fn != nil {
		job.Stream = true
		live = sandbox.NewCollector(fn, l.Output)
		forward = func(o agent.Output) { live.Add(fdStream(o.Fd), o.Data) }
	}
	res.Timings.Started = time.Now()
	deadline := res.Timings.Started.Add(l.Wall + warmGrace)
	stop := context.AfterFunc(ctx, func() { s.conn.SetDeadline(time.Now()) })
	defer stop()
	var rep agent.VMReply
	err = exchange(s.conn, deadline, job, &rep, resultDiskSize(l), forward)
	res.Timings.Finished = time.Now()
	if err != nil {
		if killErr := s.m.Kill(); killErr != nil {
			return true, sandbox.Wrap(sandbox.BackendFailure, killErr, "kill VM %s", s.id)
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			res.ExitCode, res.Signal = 137, "killed"
			res.Usage.Wall = res.Timings.Finished.Sub(res.Timings.Started)
			if ctx.Err() != nil {
				res.Class, res.Error = sandbox.Killed, "cancelled: "+ctx.Err().Error()
			} else {
				res.Class, res.Error = sandbox.Timeout, sandbox.WallLimitMessage(l.Wall)
			}
			return true, nil
		}
		return true, sandbox.Wrap(sandbox.BackendFailure, err, "control channel of VM %s; console: %s", s.id, tail(s.m.Console(), 1024))
	}
	if live != nil {
		var over bool
		rep.Stdout, rep.Stderr, over = live.Output()
		if over {
			return true, sandbox.Errorf(sandbox.BackendFailure, "", "the guest streamed more output than the %d-byte cap", l.Output)
		}
	}
	if rep.Unswept != "" {
		return true, sandbox.Errorf(sandbox.BackendFailure, "", "microvm sandbox %s may hold leftover processes: %s", s.id, rep.Unswept)
	}
	if err := fillResult(res, rep, job.ID, l); err != nil {
		return true, err
	}
	return false, nil
}

// fdStream names the stream of a guest's Output frame (1 or 2; exchange
// refuses any other).
func fdStream(fd int) sandbox.Stream {
	if fd == 2 {
		return sandbox.Stderr
	}
	return sandbox.Stdout
}

// roundTrip sends one frame and reads one reply of at most limit bytes
// before deadline.
func roundTrip(conn net.Conn, deadline time.Time, job agent.VMJob, rep *agent.VMReply, limit int64) error {
	return exchange(conn, deadline, job, rep, limit, nil)
}

// exchange is roundTrip for a job that may stream (Job.Stream): each
// Output frame before the reply goes to out, in order. Every frame's
// length is checked against limit before anything is allocated for it:
// the guest is not trusted. An Output frame for a job that did not ask to
// stream, for another job, or with an fd other than 1 or 2, is a protocol
// error.
func exchange(conn net.Conn, deadline time.Time, job agent.VMJob, rep *agent.VMReply, limit int64, out func(agent.Output)) error {
	if err := conn.SetDeadline(deadline); err != nil {
		return err
	}
	if err := agent.WriteFrame(conn, job); err != nil {
		return fmt.Errorf("send job: %w", err)
	}
	for {
		*rep = agent.VMReply{}
		var hdr [4]byte
		if _, err := io.ReadFull(conn, hdr[:]); err != nil {
			return err
		}
		n := int64(binary.BigEndian.Uint32(hdr[:]))
		if n > limit {
			return fmt.Errorf("reply of %d bytes exceeds %d: %w", n, limit, agent.ErrFrameTooLarge)
		}
		if err := agent.ReadFrame(io.MultiReader(bytes.NewReader(hdr[:]), io.LimitReader(conn, n)), rep); err != nil {
			return err
		}
		o := rep.Out
		if o == nil {
			return nil
		}
		if !job.Stream || out == nil || rep.ID != job.ID || o.Fd != 1 && o.Fd != 2 {
			return fmt.Errorf("unexpected output frame (job %q, fd %d)", rep.ID, o.Fd)
		}
		out(*o)
	}
}
