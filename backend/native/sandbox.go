package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/cgroup"
	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/sandbox"
)

// state is the sandbox lifecycle: prepared → running → used → destroyed.
// A native sandbox runs one invocation; it has no verified reset.
type state int

const (
	prepared state = iota
	running
	used
	destroyed
)

type nativeSandbox struct {
	b        *Backend
	id       string
	dir      string
	tmpl     sandbox.Template
	uid, gid uint32 // zero until allocated
	hasUID   bool

	mu      sync.Mutex
	state   state
	mounted bool
	group   *cgroup.Group
	limits  cgroup.Limits // what group enforces now
	netns   *os.File
	visit   bool // the forking thread visits group (cgroup v1; see spawn)
	spawner *spawner
	// handle and pipes are opened at Prepare, off Run's path: four cgroup
	// file opens and three pipes cost ~0.15 ms of CPU per Run otherwise.
	handle *cgroup.Handle
	pipes  *pipes
	slot   *egress.Slot // nil without Config.Network
}

// newSandbox makes the tenant-neutral parts ahead of any invocation: the
// workspace tmpfs, a cgroup with the template's limits, an empty network
// namespace and the thread that will fork the workload. Run then only
// changes limits that differ and starts the process.
func newSandbox(ctx context.Context, b *Backend, id string, tmpl sandbox.Template) (_ *nativeSandbox, err error) {
	s := &nativeSandbox{b: b, id: id, dir: filepath.Join(b.scratch, id), tmpl: tmpl}
	defer func() {
		if err != nil {
			s.Destroy(context.Background())
		}
	}()
	switch b.weak {
	case battery.RunAsRoot:
		s.uid, s.gid = 0, 0
	case battery.SharedUID:
		s.uid, s.gid = b.uids.base, b.uids.base
	default:
		uid, err := b.uids.get()
		if err != nil {
			return nil, sandbox.Wrap(sandbox.BackendFailure, err, "native: prepare")
		}
		s.uid, s.gid, s.hasUID = uid, uid, true
	}
	size := int64(sandbox.DefaultDisk)
	if b.weak == battery.NoDiskQuota {
		size = 0 // tmpfs: no size or inode limit
	}
	if err := mountWorkspace(s.dir, size, s.uid, s.gid); err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "native: workspace")
	}
	s.mounted = true
	sp := spawn{join: true, uid: s.uid, gid: s.gid, noNewPrivs: true}
	switch b.weak {
	case battery.KeepOrphans:
		sp.join = false
	case battery.RunAsRoot:
		sp.noNewPrivs = false
	}
	s.visit = sp.join && !cgroup.V2()
	s.limits = s.groupLimits(tmpl.Limits.WithDefaults(), 0)
	if s.group, err = cgroup.New(fmt.Sprintf("%s/native/%s", cgroup.Prefix, id), s.limits); err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "native: cgroup")
	}
	var visit *cgroup.Group
	if s.visit {
		visit = s.group
		s.handle = s.group.NewHandle() // the child is born inside: no cgroup.procs
	} else if s.handle, err = s.group.Open(); err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "native: cgroup")
	}
	if err = s.handle.OpenUsage(); err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "native: cgroup")
	}
	if s.pipes, err = newPipes(); err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "native: pipes")
	}
	s.spawner = newSpawner(visit) // enters the group while the netns is made
	if s.netns, s.slot, err = b.newNetwork(ctx); err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "native: netns")
	}
	if sp.netns = s.netns; b.weak == battery.HostNetwork {
		sp.netns = nil
	}
	if err = s.spawner.configure(sp); err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "native: spawner")
	}
	return s, nil
}

// claim moves prepared → running; anything else is a caller bug reported
// as an error rather than a panic, since pools call it concurrently.
func (s *nativeSandbox) claim() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != prepared {
		return sandbox.Errorf(sandbox.BackendFailure, "", "native sandbox %s is not fresh (state %d): sandboxes run one invocation", s.id, s.state)
	}
	s.state = running
	return nil
}

// Run implements sandbox.Sandbox.
func (s *nativeSandbox) Run(ctx context.Context, inv *sandbox.Invocation) (*sandbox.Result, error) {
	if err := inv.Validate(); err != nil {
		return nil, err
	}
	if inv.Workload.Kind != sandbox.KindCommand {
		return nil, sandbox.Errorf(sandbox.BadInput, "workload.kind", "native runs command workloads, not %s", inv.Workload.Kind)
	}
	if err := s.checkNetwork(inv); err != nil {
		return nil, err
	}
	if err := s.claim(); err != nil {
		return nil, err
	}
	defer func() { s.mu.Lock(); s.state = used; s.mu.Unlock() }()
	if err := s.applyNetwork(ctx, inv); err != nil {
		return nil, err
	}

	lim := inv.Limits.WithDefaults()
	if lim.Disk != sandbox.DefaultDisk && s.b.weak != battery.NoDiskQuota {
		if err := resizeWorkspace(s.dir, lim.Disk); err != nil {
			return nil, sandbox.Wrap(sandbox.BackendFailure, err, "native: workspace")
		}
	}
	if err := writeFiles(s.dir, inv.Workload.Files, s.uid, s.gid); err != nil {
		return nil, err
	}
	// Resolved and checked as the agent does inside container, gVisor and
	// microVM sandboxes, so a program that cannot start reads the same on
	// every backend (sandbox.NotStarted).
	prog, err := agent.LookPathIn("/", s.dir, inv.Workload.Argv[0], inv.Workload.Env, nil)
	if err != nil {
		return s.notStarted(inv, err.Error()), nil
	}
	if err := s.setLimits(s.groupLimits(lim, inv.Resources.CPUMillis)); err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "native: cgroup limits")
	}
	return s.run(ctx, inv, prog, lim)
}

// groupLimits is what the cgroup enforces for lim.
func (b *Backend) groupLimits(lim sandbox.Limits, cpuMillis int64) cgroup.Limits {
	cl := cgroup.Limits{Memory: lim.Memory, Pids: lim.Pids, CPUMillis: cpuMillis}
	switch b.weak {
	case battery.NoPidsLimit:
		cl.Pids = 0
	case battery.NoMemoryLimit:
		cl.Memory = 0
	}
	return cl
}

// groupLimits is b.groupLimits plus room in pids for the forking thread
// while it visits the group.
func (s *nativeSandbox) groupLimits(lim sandbox.Limits, cpuMillis int64) cgroup.Limits {
	cl := s.b.groupLimits(lim, cpuMillis)
	if s.visit && cl.Pids > 0 {
		cl.Pids++
	}
	return cl
}

// setLimits writes only the limits that differ from those the group has
// (usually none: Prepare applied the template's). A zero field means
// unlimited, which a group that had a limit cannot go back to here.
func (s *nativeSandbox) setLimits(cl cgroup.Limits) error {
	was := s.limits
	if cl.Memory == 0 && was.Memory != 0 || cl.Pids == 0 && was.Pids != 0 || cl.CPUMillis == 0 && was.CPUMillis != 0 {
		return fmt.Errorf("cannot lift limits %+v to %+v", was, cl)
	}
	diff := cl
	if diff.Memory == was.Memory {
		diff.Memory = 0
	}
	if diff.Pids == was.Pids {
		diff.Pids = 0
	}
	if diff.CPUMillis == was.CPUMillis {
		diff.CPUMillis = 0
	}
	if diff == (cgroup.Limits{}) {
		return nil
	}
	if err := s.group.SetLimits(diff); err != nil {
		return err
	}
	s.limits = cl
	return nil
}

func (s *nativeSandbox) run(ctx context.Context, inv *sandbox.Invocation, prog string, lim sandbox.Limits) (*sandbox.Result, error) {
	p := s.pipes
	defer p.close()
	cmd := exec.Command(prog)
	cmd.Args = inv.Workload.Argv
	cmd.Env = sandbox.GPUEnv(inv.Workload.Env, inv.GPUs) // non-nil: nothing inherited; only the assigned GPUs named
	if s.b.weak == battery.InheritEnv {
		cmd.Env = append(os.Environ(), cmd.Env...)
	}
	cmd.Dir = s.dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.stdinR, p.stdoutW, p.stderrW
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid:     true,
		Credential: &syscall.Credential{Uid: s.uid, Gid: s.gid, Groups: []uint32{}},
	}
	rl := &rlimits{noFile: uint64(lim.NoFile), fsize: uint64(lim.Disk)}
	if lim.CPU > 0 {
		rl.cpu = uint64((lim.CPU + time.Second - 1) / time.Second)
	}
	switch s.b.weak {
	case battery.NoRlimits, battery.NoDiskQuota:
		rl = nil
	}
	res := &sandbox.Result{ID: inv.ID, Backend: s.b.Name()}
	res.Timings.Started = time.Now()
	h := s.handle
	defer h.Close()
	wait, err := s.spawner.start(cmd, rl, h, s.b.weak == battery.TraceStopAsExit)
	if err != nil {
		// execve itself refused (the sandbox's uid may not read or run
		// what root could see): the workload's outcome, as on every tier.
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) && pe.Op == "fork/exec" {
			res.Timings.Finished = time.Now()
			sandbox.NotStarted(res, pe.Error())
			return res, nil
		}
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "native: start")
	}
	p.closeChildEnds()

	if s.b.weak == battery.NoOutputCap {
		lim.Output = 1 << 40
	}
	stdout, stderr := &sandbox.Capped{Limit: lim.Output}, &sandbox.Capped{Limit: lim.Output}
	var drain sync.WaitGroup
	drain.Go(func() { copyQuiet(stdout, p.stdoutR) })
	drain.Go(func() { copyQuiet(stderr, p.stderrR) })
	if len(inv.Workload.Stdin) == 0 {
		p.stdinW.Close() // EOF at once, and no goroutine to wake
	} else {
		go func() {
			// Stdin is fed in the background; EPIPE from a workload that
			// never reads it is not an error.
			p.stdinW.Write(inv.Workload.Stdin)
			p.stdinW.Close()
		}()
	}

	if s.b.weak == battery.NoDeadline {
		lim.Wall = 1 << 62
	}
	killCtx := context.WithoutCancel(ctx)
	disarm := s.watch(ctx, lim.Wall, res)
	ws, err := wait()
	disarm()
	res.Usage.Wall = time.Since(res.Timings.Started)
	// The leader is gone; whatever it left behind goes too, which also
	// closes every copy of the output pipes. Then the forking thread,
	// which Kill counts as no workload, may leave.
	kerr := h.Kill(killCtx)
	s.spawner.close()
	if kerr != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, kerr, "native: kill leftovers")
	}
	drain.Wait()
	res.Timings.Finished = time.Now()
	st := h.Usage()
	res.Usage.CPU, res.Usage.PeakMemory = st.CPU, st.PeakMemory
	res.Stdout, res.StdoutTruncated = stdout.Bytes(), stdout.Truncated
	res.Stderr, res.StderrTruncated = stderr.Bytes(), stderr.Truncated
	sig := exitStatus(res, ws, err)
	if res.Class == sandbox.OK && st.OOMKills > 0 {
		res.Class, res.Error = sandbox.OOM, sandbox.MemoryLimitMessage(lim.Memory)
	}
	if res.Class == sandbox.OK && lim.CPU > 0 && st.CPU >= lim.CPU && (sig == syscall.SIGXCPU || sig == syscall.SIGKILL) {
		res.Class, res.Error = sandbox.Timeout, sandbox.CPULimitMessage(lim.CPU)
	}
	if res.Files, err = collectFiles(s.dir, inv.Workload.Collect, lim.Disk); err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "native: collect files")
	}
	return res, nil
}

// watch kills the group when the wall deadline passes or ctx is cancelled,
// recording why in res, while Run waits for the leader itself. The
// returned func disarms both and waits for a kill that already began.
func (s *nativeSandbox) watch(ctx context.Context, wall time.Duration, res *sandbox.Result) (disarm func()) {
	var once sync.Once
	fired := make(chan struct{})
	fire := func(class sandbox.Class, why string) {
		once.Do(func() {
			res.Class, res.Error = class, why
			_ = s.group.Kill(context.WithoutCancel(ctx))
			close(fired)
		})
	}
	timer := time.AfterFunc(wall, func() { fire(sandbox.Timeout, sandbox.WallLimitMessage(wall)) })
	stop := context.AfterFunc(ctx, func() { fire(sandbox.Killed, fmt.Sprintf("cancelled: %v", context.Cause(ctx))) })
	return func() {
		if t, c := timer.Stop(), stop(); !t || !c {
			<-fired
		}
	}
}

// exitStatus fills the exit code and signal and returns the signal, if one
// ended the process.
func exitStatus(res *sandbox.Result, ws syscall.WaitStatus, waitErr error) syscall.Signal {
	if waitErr != nil {
		res.ExitCode = -1
		if res.Class == sandbox.OK {
			res.Class, res.Error = sandbox.BackendFailure, fmt.Sprint(waitErr)
		}
		return 0
	}
	if ws.Signaled() {
		res.Signal = ws.Signal().String()
		res.ExitCode = 128 + int(ws.Signal())
		return ws.Signal()
	}
	res.ExitCode = ws.ExitStatus()
	return 0
}

func copyQuiet(dst io.Writer, src io.Reader) {
	_, _ = io.Copy(dst, src)
}

// Destroy implements sandbox.Sandbox: kill everything, remove the cgroup and
// the workspace. It is idempotent and ignores ctx cancellation.
func (s *nativeSandbox) Destroy(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == destroyed {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var errs []error
	if s.spawner != nil {
		s.spawner.close()
		s.spawner.wait() // out of the group before its rmdir
	}
	if s.pipes != nil {
		s.pipes.close()
	}
	if s.handle != nil {
		_ = s.handle.Close() // before the group's rmdir
	}
	if s.group != nil {
		errs = append(errs, s.group.Destroy(ctx))
	}
	if s.netns != nil {
		errs = append(errs, s.netns.Close())
	}
	if s.slot != nil {
		errs = append(errs, s.slot.Close(ctx))
	}
	if s.mounted {
		errs = append(errs, unmountWorkspace(s.dir))
	}
	if s.hasUID {
		s.b.uids.put(s.uid)
		s.hasUID = false
	}
	s.state = destroyed
	if err := errors.Join(errs...); err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "native: destroy %s", s.id)
	}
	return nil
}

// notStarted is the result of a workload whose program could not be
// started: nothing ran.
func (s *nativeSandbox) notStarted(inv *sandbox.Invocation, why string) *sandbox.Result {
	res := &sandbox.Result{ID: inv.ID, Backend: s.b.Name()}
	res.Timings.Started = time.Now()
	res.Timings.Finished = res.Timings.Started
	sandbox.NotStarted(res, why)
	return res
}
