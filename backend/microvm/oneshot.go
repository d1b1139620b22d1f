package microvm

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/vmimage"
	"github.com/wovyr/wovyr/vmm"
)

// runOneShot writes the job disk, boots the VM sized for inv, waits for the
// guest to power off (or kills it at the deadline) and reads the result
// disk.
func (s *vmSandbox) runOneShot(ctx context.Context, inv *sandbox.Invocation) (*sandbox.Result, error) {
	l := inv.Limits.WithDefaults()
	if s.b.cfg.weak == battery.NoOutputCap {
		l.Output = sandbox.MaxOutputBytes
	}
	if l.Disk != s.limit.Disk && !s.reused {
		// The VM is not booted yet: size the scratch disk for this invocation.
		if err := vmimage.MakeExt4(ctx, "", s.scratch(), "wovyr-scratch", s.b.scratchSize(l.Disk)); err != nil {
			return nil, sandbox.Wrap(sandbox.BackendFailure, err, "scratch disk")
		}
	}
	job := s.b.vmJob(inv, l)
	jobDisk, resultDisk := filepath.Join(s.dir, "job.img"), filepath.Join(s.dir, "result.img")
	if err := writeJobDisk(jobDisk, job); err != nil {
		return nil, err
	}
	resultSize := resultDiskSize(l)
	if err := os.WriteFile(resultDisk, nil, 0o600); err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "result disk")
	}
	if err := os.Truncate(resultDisk, resultSize); err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "result disk")
	}
	spec := s.b.spec(s.p, s.p.accel, "vm-"+s.id, agent.ModeOneShot, s.b.guestRAM(l.Memory))
	spec.UID, spec.GID = s.uid, s.gid
	if err := s.oneShotNet(ctx, inv); err != nil {
		return nil, err
	}
	if s.net != nil {
		s.net.attach(spec)
	}
	spec.Disks = []vmm.Disk{
		{Path: s.root, Serial: agent.SerialRoot, ReadOnly: true},
		{Path: s.scratch(), Serial: agent.SerialScratch},
		{Path: jobDisk, Serial: agent.SerialJob, ReadOnly: true},
		{Path: resultDisk, Serial: agent.SerialResult},
	}
	res := &sandbox.Result{ID: inv.ID, Backend: s.b.Name(), Accel: string(s.p.accel)}
	res.Timings.Started = time.Now()
	release, err := s.passThrough(ctx, inv.GPUs, spec)
	if err != nil {
		return nil, err
	}
	m, err := s.b.cfg.VMM.Start(ctx, spec)
	if err != nil {
		s.giveBack(release, nil)
		return nil, err
	}
	defer s.giveBack(release, m) // kills m first
	deadline := l.Wall + s.b.cfg.bootTimeout(s.p.accel)
	wctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	waitErr := m.Wait(wctx)
	peak := vmm.PeakMemory(m)
	if waitErr != nil && wctx.Err() != nil {
		// The guest never answered: kill it, whatever it was doing.
		killErr := m.Kill()
		res.Timings.Finished = time.Now()
		res.ExitCode, res.Signal = 137, "killed"
		res.Usage.Wall = res.Timings.Finished.Sub(res.Timings.Started)
		if ctx.Err() != nil {
			res.Class, res.Error = sandbox.Killed, "cancelled: "+ctx.Err().Error()
		} else {
			res.Class, res.Error = sandbox.Timeout, sandbox.WallLimitMessage(l.Wall)
		}
		if killErr != nil {
			return nil, sandbox.Wrap(sandbox.BackendFailure, killErr, "kill VM %s", s.id)
		}
		return res, nil
	}
	exited := time.Now()
	if err := m.Kill(); err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "clean up VM %s", s.id)
	}
	s.b.cfg.Logger.Debug("microvm one-shot done", "vm", s.id, "vm_lifetime", exited.Sub(res.Timings.Started),
		"cleanup", time.Since(exited), "console", tail(m.Console(), 2048))
	res.Timings.Finished = time.Now()
	rep, err := readResultDisk(resultDisk)
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "VM %s gave no readable result (VMM: %v); console: %s", s.id, waitErr, tail(m.Console(), 1024))
	}
	if err := fillResult(res, rep, job.ID, l); err != nil {
		return nil, err
	}
	if res.Usage.PeakMemory == 0 {
		res.Usage.PeakMemory = peak
	}
	return res, nil
}

// vmJob turns an invocation into the guest's job: its limits inside the
// VM (the job cgroup's memory and pids, the rlimits the agent sets, the
// wall deadline) less whatever a positive control's weakness drops.
func (b *Backend) vmJob(inv *sandbox.Invocation, l sandbox.Limits) agent.VMJob {
	id := inv.ID
	if id == "" {
		id = "job"
	}
	files := make([]agent.File, len(inv.Workload.Files))
	for i, f := range inv.Workload.Files {
		files[i] = agent.File{Path: f.Path, Data: f.Data, Mode: f.Mode}
	}
	job := agent.VMJob{
		Job: agent.Job{ID: id, Argv: inv.Workload.Argv, Env: inv.Workload.Env, Dir: agent.GuestWorkDir,
			Stdin: inv.Workload.Stdin, Files: files, Wall: l.Wall, Output: l.Output,
			Rlimits: []agent.Rlimit{
				{Resource: unix.RLIMIT_NOFILE, Cur: uint64(l.NoFile), Max: uint64(l.NoFile)},
				{Resource: unix.RLIMIT_CORE},
			}},
		Memory: l.Memory, Pids: l.Pids,
	}
	switch b.cfg.weak {
	case battery.NoRlimits:
		job.Rlimits = nil
	case battery.NoPidsLimit:
		job.Pids = 0
	case battery.NoMemoryLimit:
		job.Memory = 0
	case battery.NoDeadline:
		job.Wall = 0
	case battery.InheritEnv:
		job.Env = append(os.Environ(), job.Env...)
	case battery.TraceStopAsExit:
		job.TraceStopIsExit = true
	}
	return job
}

func writeJobDisk(path string, job agent.VMJob) error {
	b, err := json.Marshal(job)
	if err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "encode job")
	}
	size := (int64(len(b)) + 4 + 4095) &^ 4095
	buf := make([]byte, size)
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[4:], b)
	if err := os.WriteFile(path, buf, 0o600); err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "job disk")
	}
	return nil
}

// resultDiskSize fits two capped streams base64-encoded in JSON, plus room
// for the rest of the reply.
func resultDiskSize(l sandbox.Limits) int64 {
	return (2*l.Output*4/3 + 1<<20 + 4095) &^ 4095
}

// readResultDisk reads the reply the guest left. Whatever is on the disk is
// the guest's: a bad length or bytes that do not decode are an error.
func readResultDisk(path string) (agent.VMReply, error) {
	var rep agent.VMReply
	f, err := os.Open(path)
	if err != nil {
		return rep, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return rep, err
	}
	if err := agent.ReadDiskFrame(f, st.Size(), &rep); err != nil {
		return rep, err
	}
	return rep, nil
}

var errWrongReply = errors.New("reply for another job")

// fillResult maps the guest's reply onto res.
func fillResult(res *sandbox.Result, rep agent.VMReply, jobID string, l sandbox.Limits) error {
	if rep.ID != jobID {
		return sandbox.Wrap(sandbox.BackendFailure, errWrongReply, "guest replied for %q, want %q", rep.ID, jobID)
	}
	if rep.Setup != "" {
		return sandbox.Errorf(sandbox.BackendFailure, "", "the guest could not prepare the job: %s", rep.Setup)
	}
	if err := sandbox.CheckReplyOutput("the guest", rep.Stdout, rep.Stderr, l.Output); err != nil {
		return err
	}
	res.ExitCode, res.Signal = rep.ExitCode, rep.Signal
	res.Stdout, res.Stderr = nonNil(rep.Stdout), nonNil(rep.Stderr)
	res.StdoutTruncated, res.StderrTruncated = rep.StdoutTruncated, rep.StderrTruncated
	res.Usage.Wall, res.Usage.CPU, res.Usage.PeakMemory = rep.Wall, rep.CPU, rep.MaxRSS
	switch {
	case rep.TimedOut:
		res.Class, res.Error = sandbox.Timeout, sandbox.WallLimitMessage(l.Wall)
	case rep.OOMKilled && rep.Signal != "":
		res.Class, res.Error = sandbox.OOM, sandbox.MemoryLimitMessage(l.Memory)
	case rep.OOMKilled:
		res.Error = "a process of the workload was killed at the memory limit; the workload went on"
	case rep.Error != "":
		// Could not start (e.g. command not found): report it as a shell
		// would, and as every other backend does (sandbox.NotStarted).
		var cut bool
		res.Stderr, cut = sandbox.AppendNotStarted(res.Stderr, rep.Error, l.Output)
		res.StderrTruncated = res.StderrTruncated || cut
	}
	return nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
