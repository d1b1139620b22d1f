package agent

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// jobCgroup is the cgroup v2 group, inside the VM, that bounds the job.
const jobCgroup = "/sys/fs/cgroup/wovyr-job"

// oneShot reads the job from the job disk, runs it and writes the reply to
// the result disk, synced, so the host finds it once the VM is gone.
func oneShot(ctx context.Context, jobDev, resultDev string, setupErr error, stage func(string)) error {
	var job VMJob
	jf, err := os.Open(jobDev)
	if err != nil {
		return err
	}
	size, err := jf.Seek(0, io.SeekEnd)
	if err == nil {
		err = ReadDiskFrame(jf, size, &job)
	}
	jf.Close()
	stage("job read")
	var rep VMReply
	if err != nil {
		rep = VMReply{Setup: fmt.Sprintf("read job disk: %v", err)}
	} else {
		rep = runVMJob(ctx, job, setupErr, &jobCgroupState{}, nil)
	}
	stage(fmt.Sprintf("job ran (wall %v)", rep.Wall))
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	rf, err := os.OpenFile(resultDev, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer rf.Close()
	rsize, err := rf.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	if int64(len(b))+4 > rsize {
		// Never write a frame the host would have to cut: say so instead.
		b, _ = json.Marshal(VMReply{Reply: Reply{ID: job.ID}, Setup: fmt.Sprintf("reply of %d bytes exceeds the %d-byte result disk", len(b), rsize)})
	}
	frame := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(frame, uint32(len(b)))
	copy(frame[4:], b)
	if _, err := rf.WriteAt(frame, 0); err != nil {
		return err
	}
	err = rf.Sync()
	stage("result written")
	return err
}

// serveWarm answers jobs on the control port until the host hangs up.
func serveWarm(ctx context.Context, setupErr error) error {
	dev, err := findPort(PortControl, 10*time.Second)
	if err != nil {
		return err
	}
	port, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer port.Close()
	var cg jobCgroupState
	for {
		var job VMJob
		if err := ReadFrame(port, &job); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		var rep VMReply
		if len(job.Argv) == 0 && job.File == nil && job.Procs == nil {
			rep = VMReply{Reply: Reply{ID: job.ID}, Boot: uptime()}
			if setupErr == nil && job.Thaw != nil {
				setupErr = thaw(job.Thaw) // a clone that cannot thaw runs nothing
			}
			if setupErr == nil && job.ClockStep != 0 {
				setupErr = stepClock(job.ClockStep)
			}
			rep.Clock = time.Now()
			if setupErr != nil {
				rep.Setup = setupErr.Error()
			}
		} else {
			rep = warmJob(ctx, port, job, setupErr, &cg)
		}
		if err := WriteFrame(port, rep); err != nil {
			return err
		}
		if job.Shutdown {
			return nil
		}
	}
}

// warmJob runs one job of a warm VM: a command, streamed to w if it asks
// (Job.Stream), or one of a session's file, background and procs jobs,
// answered as a sandbox's agent answers them (Serve); then the sweep a
// session's exec asks for.
func warmJob(ctx context.Context, w io.Writer, job VMJob, setupErr error, cg *jobCgroupState) VMReply {
	var rep VMReply
	switch {
	case setupErr != nil:
		rep = VMReply{Reply: Reply{ID: job.ID}, Setup: setupErr.Error()}
	case job.File != nil:
		rep.Reply = fileJob(job.Job)
	case job.Procs != nil:
		rep.Reply = bg.procsJob(job.Job)
	case job.Background:
		rep = startVMJob(job, cg)
	default:
		var emit emitFunc
		if job.Stream {
			emit = streamTo(w, job.ID)
		}
		rep = runVMJob(ctx, job, nil, cg, emit)
	}
	if job.Sweep && setupErr == nil {
		if err := sweepVM(); err != nil {
			rep.Unswept = err.Error()
		}
	}
	return rep
}

// startVMJob starts a background job under the job's limits: in the job
// cgroup, which bounds all of a session's processes together, and with
// its rlimits, which it keeps.
func startVMJob(job VMJob, cg *jobCgroupState) VMReply {
	rep := VMReply{Reply: Reply{ID: job.ID}}
	if err := cg.limit(job); err != nil {
		rep.Setup = err.Error()
		return rep
	}
	if job.Dir == "" {
		job.Dir = GuestWorkDir
	}
	restore, err := lowerRlimits(job.Rlimits)
	if err != nil {
		rep.Setup = err.Error()
		return rep
	}
	rep.Reply = bg.start(job.Job, cg.attr)
	if err := restore(); err != nil {
		rep.Setup = err.Error()
	}
	return rep
}

// sweepVM is the sweep (sweep.go) for a VM's init. There kill(-1) reaches
// the kernel's threads too, which ignore it, so it never finds nobody:
// the sweep scans instead — init's process tree, which holds every user
// process and no kernel thread (scanTree), or /proc where the kernel keeps
// no children lists — sparing session 0, which is the kernel threads'
// alone (a user process's session is a user process's pid), beside the
// sessions of held background processes.
func sweepVM() error {
	spare := bg.sessions()
	spare[0] = true
	return sweepWith(func() ([]procStat, error) {
		ps, err := scanTree(1)
		if err != nil {
			return scanProcs()
		}
		return ps, nil
	}, spare)
}

func findPort(name string, limit time.Duration) (string, error) {
	deadline := time.Now().Add(limit)
	for {
		ents, _ := os.ReadDir("/sys/class/virtio-ports")
		for _, e := range ents {
			n, err := os.ReadFile(filepath.Join("/sys/class/virtio-ports", e.Name(), "name"))
			if err == nil && strings.TrimSpace(string(n)) == name {
				return "/dev/" + e.Name(), nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("virtio-serial port %s did not appear", name)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// runVMJob applies the job's limits with a cgroup inside the VM and runs
// it; emit, if set, gets its output as it comes.
func runVMJob(ctx context.Context, job VMJob, setupErr error, cg *jobCgroupState, emit emitFunc) VMReply {
	rep := VMReply{Boot: uptime()}
	rep.ID = job.ID
	if setupErr != nil {
		rep.Setup = setupErr.Error()
		return rep
	}
	if err := cg.limit(job); err != nil {
		rep.Setup = err.Error()
		return rep
	}
	if job.Dir == "" {
		job.Dir = GuestWorkDir
	}
	restore, err := lowerRlimits(job.Rlimits)
	if err != nil {
		rep.Setup = err.Error()
		return rep
	}
	// The group outlives the job in a session (and holds its background
	// processes): only a kill during this job is this job's.
	kills := cg.oomKills()
	rep.Reply = execute(ctx, job.Job, cg.attr, emit)
	if err := restore(); err != nil {
		rep.Setup = err.Error() // a VM whose agent cannot serve another job: a backend failure
	}
	rep.OOMKilled = cg.oomKills() > kills
	return rep
}

// lowerRlimits sets the job's rlimits on the agent, which the job inherits
// at fork, and returns what puts the agent's own back. Unlike a sandbox's
// agent on the OCI tiers, the guest's serves every job of its VM and is
// root in it, so it may raise them again once the job has ended.
func lowerRlimits(limits []Rlimit) (restore func() error, err error) {
	saved := make([]syscall.Rlimit, len(limits))
	for i, r := range limits {
		if err := syscall.Getrlimit(r.Resource, &saved[i]); err != nil {
			return nil, fmt.Errorf("getrlimit %d: %w", r.Resource, err)
		}
	}
	restore = func() error {
		var errs []error
		for i, r := range limits {
			if err := syscall.Setrlimit(r.Resource, &saved[i]); err != nil {
				errs = append(errs, fmt.Errorf("restore rlimit %d: %w", r.Resource, err))
			}
		}
		return errors.Join(errs...)
	}
	if err := SetRlimits(limits); err != nil {
		return nil, errors.Join(err, restore())
	}
	return restore, nil
}

// prepareJobCgroup creates the job's cgroup at boot, before any tenant:
// mounting cgroup2 and enabling controllers is slow under TCG and the same
// for every job.
func prepareJobCgroup() error {
	const root = "/sys/fs/cgroup"
	if _, err := os.Stat(root + "/cgroup.controllers"); err != nil {
		_ = os.MkdirAll(root, 0o755)
		if err := unix.Mount("cgroup2", root, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("mount cgroup2: %w", err)
		}
	}
	if err := os.WriteFile(root+"/cgroup.subtree_control", []byte("+memory +pids"), 0); err != nil {
		return fmt.Errorf("enable cgroup controllers: %w", err)
	}
	if err := os.Mkdir(jobCgroup, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return nil
}

// jobCgroupState is what the agent last wrote to the job cgroup. Under
// TCG every cgroup write is slow, so a warm VM writes a limit only when it
// changes. The job is born inside the group (clone3 with
// CLONE_INTO_CGROUP): nothing ever migrates, which in cgroup v2 costs an
// RCU grace period (tens of ms under TCG), and the agent stays outside,
// so the limits are the job's own.
type jobCgroupState struct {
	dir          *os.File // the group's directory; nil: no limits, no group
	memory, pids int64    // the limits written; 0: none yet
}

// limit writes the job's limits to its cgroup and opens the group for
// attr.
func (c *jobCgroupState) limit(job VMJob) error {
	if job.Memory == 0 && job.Pids == 0 {
		return nil
	}
	if c.dir == nil {
		d, err := os.Open(jobCgroup)
		if err != nil {
			return fmt.Errorf("job cgroup: %w", err)
		}
		c.dir = d // kept for the agent's life, like the group
	}
	if job.Memory > 0 && job.Memory != c.memory {
		if err := os.WriteFile(jobCgroup+"/memory.max", []byte(strconv.FormatInt(job.Memory, 10)), 0); err != nil {
			return fmt.Errorf("memory.max: %w", err)
		}
		if c.memory == 0 {
			_ = os.WriteFile(jobCgroup+"/memory.swap.max", []byte("0"), 0)
		}
		c.memory = job.Memory
	}
	if job.Pids > 0 && int64(job.Pids) != c.pids {
		if err := os.WriteFile(jobCgroup+"/pids.max", []byte(strconv.Itoa(job.Pids)), 0); err != nil {
			return fmt.Errorf("pids.max: %w", err)
		}
		c.pids = int64(job.Pids)
	}
	return nil
}

// attr starts the job inside the group, if limit opened one.
func (c *jobCgroupState) attr(a *syscall.SysProcAttr) {
	if c.dir != nil {
		a.UseCgroupFD, a.CgroupFD = true, int(c.dir.Fd())
	}
}

// oomKills is the job cgroup's count of OOM kills so far.
func (c *jobCgroupState) oomKills() int64 {
	ev, err := os.ReadFile(jobCgroup + "/memory.events")
	if err != nil {
		return 0
	}
	return eventCount(ev, "oom_kill")
}

func eventCount(b []byte, key string) int64 {
	for _, line := range bytes.Split(b, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(" "))
		if ok && string(k) == key {
			n, _ := strconv.ParseInt(string(v), 10, 64)
			return n
		}
	}
	return 0
}

func uptime() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
