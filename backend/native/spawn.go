package native

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/cgroup"
)

// onThrowawayThread runs fn, which may change the thread's network
// namespace and ids, on an OS thread that dies afterwards: the goroutine
// exits still locked, which makes the Go runtime terminate the thread.
//
// One exception: the runtime cannot terminate the main thread, so a locked
// goroutine that happens to run there leaves it parked instead — and the
// main thread's namespace and ids are what /proc/<pid>/ns/net and
// /proc/<pid>/status show for all of wovyr. So the namespace and real ids
// are put back too.
func onThrowawayThread(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with us
		home, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			done <- fmt.Errorf("open own netns: %w", err)
			return
		}
		defer home.Close()
		uid, gid := os.Getuid(), os.Getgid() // this thread's, before fn changes them
		err = fn()
		_ = unix.Setns(int(home.Fd()), unix.CLONE_NEWNET)
		keep := ^uintptr(0)
		unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), keep, keep)
		unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), keep, keep)
		done <- err
	}()
	return <-done
}

// rlimits applied to every workload before its first instruction.
type rlimits struct {
	noFile uint64
	fsize  uint64
	cpu    uint64 // seconds; zero means unset
}

// spawn is everything a workload's process gets before its first
// instruction that does not depend on the invocation.
type spawn struct {
	netns      *os.File // nil: stay in wovyr's namespace (positive controls only)
	join       bool     // false: the child stays out of the cgroup (positive controls only)
	uid, gid   uint32
	noNewPrivs bool
}

// Where the forking thread is while it visits a group (cgroup v1):
//
//   - From Prepare on, in all of the group's controllers, so that the
//     child is born inside them and Run's path moves nothing.
//   - Once the workload runs, off Run's path, it leaves memory (so it
//     charges nothing there), freezer (so Kill rarely meets it) and cpu (so
//     the workload's quota never throttles it). The memcg OOM killer picks
//     among processes by their leader, never a visiting thread's wovyr
//     (TestOOMSparesWovyr checks that on the host).
//   - It stays in pids (pids.max is one higher; the workload gets exactly
//     its limit) and cpuacct (its fork is a few µs of the usage) until Run
//     has killed leftovers, and leaves both before it ends.
//
// Kill and Reconcile skip a process whose leader is outside the group.
var visitRun = []string{"memory", "freezer", "cpu"}

// spawner is a sandbox's forking thread, made at Prepare and parked until
// Run hands it the one command it starts.
//
// Network namespace, no_new_privs and credentials are per-thread in Linux
// and inherited by children forked from that thread, so the thread takes
// them at Prepare and Run pays only for the fork. The thread then reaps
// the child itself (it is the tracer of a child that calls PTRACE_TRACEME)
// and stays parked until close, which Run calls once it has the child's
// status: the child's parent-death
// signal (SIGKILL) fires when that *thread* exits, so if wovyr dies at any
// moment — even between exec and confinement — the workload dies with it.
// The goroutine never unlocks its thread, so the runtime ends the thread
// with it and no tainted thread ever runs other goroutines.
type spawner struct {
	visit bool // the thread visits the group
	cfg   chan spawn
	ready chan error
	req   chan spawnReq
	quit  chan struct{}
	gone  chan struct{} // closed when the thread is done
	stop  sync.Once
}

type spawnReq struct {
	cmd     *exec.Cmd
	limits  *rlimits       // nil: inherit wovyr's (positive controls only)
	group   *cgroup.Handle // the sandbox's, opened at Prepare
	started chan error
	exited  chan exited // the leader's end, once started
	// stopIsExit: take a ptrace-stop for the exit (row 94's control only)
	stopIsExit bool
}

// exited is how the leader ended, as the forking thread's wait saw it.
type exited struct {
	ws  syscall.WaitStatus
	err error
}

// newSpawner starts the thread. Where visit is not nil it enters visit's
// groups at once (see Visit), overlapping the rest of Prepare; configure
// then gives it the rest of what the child inherits.
func newSpawner(visit *cgroup.Group) *spawner {
	s := &spawner{visit: visit != nil, cfg: make(chan spawn), ready: make(chan error, 1),
		req: make(chan spawnReq), quit: make(chan struct{}), gone: make(chan struct{})}
	onOwnThread(func() {
		defer close(s.gone)
		var v *cgroup.Visit
		var verr error
		if visit != nil {
			if v, verr = visit.NewVisit(); verr == nil {
				defer v.Close()
				defer v.Leave() // before the thread ends: rmdir needs it out
				verr = v.Enter()
			}
		}
		var sp spawn
		select {
		case sp = <-s.cfg:
		case <-s.quit:
			return
		}
		if verr != nil {
			s.ready <- verr
			return
		}
		if err := sp.enter(); err != nil {
			s.ready <- err
			return
		}
		s.ready <- nil
		select {
		case r := <-s.req:
			if sp.serve(r, v) {
				if v != nil {
					_ = v.Leave(visitRun...) // while the workload runs
				}
				// This thread reaps the leader: it is the tracer of a
				// leader that calls PTRACE_TRACEME, and only the tracer
				// can detach at its ptrace-stops (issue #25 item 1).
				var e exited
				e.err = agent.WaitUntraced(r.cmd.Process.Pid, &e.ws, nil, r.stopIsExit)
				r.exited <- e
				<-s.quit // the child's parent lives until Run is done with it
			}
		case <-s.quit:
		}
	})
	return s
}

// configure parks the thread configured by sp. Call it once; on error the
// spawner is done (close it all the same).
func (s *spawner) configure(sp spawn) error {
	select {
	case s.cfg <- sp:
	case <-s.gone:
		return errors.New("spawner already ended")
	}
	return <-s.ready
}

// onOwnThread runs fn on a locked OS thread that ends with fn, never the
// main thread: the runtime cannot end that one, and it is the thread whose
// namespace and ids /proc shows for all of wovyr.
func onOwnThread(fn func()) {
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with us
		if unix.Gettid() != unix.Getpid() {
			fn()
			return
		}
		// Hold the main thread (untouched) until fn runs elsewhere.
		running := make(chan struct{})
		onOwnThread(func() { close(running); fn() })
		<-running
		runtime.UnlockOSThread()
	}()
}

// enter gives the calling (parked) thread what the child inherits.
func (sp spawn) enter() error {
	if sp.netns != nil {
		if err := unix.Setns(int(sp.netns.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("enter netns: %w", err)
		}
	}
	if sp.noNewPrivs {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("no_new_privs: %w", err)
		}
	}
	// prlimit(2) on another process needs CAP_SYS_RESOURCE or matching real
	// ids. wovyr may lack the capability (it does in some containers), so
	// this thread takes the workload's real ids; its effective uid stays 0,
	// which the child needs to switch to them fully.
	keep := ^uintptr(0) // -1: leave unchanged
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(sp.gid), keep, keep); e != 0 {
		return fmt.Errorf("setresgid: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(sp.uid), keep, keep); e != 0 {
		return fmt.Errorf("setresuid: %w", e)
	}
	return nil
}

// start has the parked thread start cmd confined: stopped at its execve
// (traced), given its rlimits and moved into h's group (or, where the
// thread visits the group, born inside it), then released. On error the
// child is killed and reaped. The caller waits with the returned wait
// (never cmd.Wait: the thread reaps the leader) and then calls close. A
// spawner starts one command.
func (s *spawner) start(cmd *exec.Cmd, limits *rlimits, h *cgroup.Handle, stopIsExit bool) (wait func() (syscall.WaitStatus, error), err error) {
	r := spawnReq{cmd: cmd, limits: limits, group: h, started: make(chan error, 1), exited: make(chan exited, 1), stopIsExit: stopIsExit}
	select {
	case s.req <- r:
	case <-s.gone:
		return nil, errors.New("spawner already used")
	}
	if err := <-r.started; err != nil {
		return nil, err
	}
	return func() (syscall.WaitStatus, error) {
		e := <-r.exited
		_ = cmd.Process.Release() // reaped already; frees its pidfd
		return e.ws, e.err
	}, nil
}

// close ends the parked thread. Once a command started, call it only after
// cmd.Wait returned: the thread's exit kills the child.
func (s *spawner) close() {
	s.stop.Do(func() { close(s.quit) })
}

// wait waits until a closed spawner's thread has left the group.
func (s *spawner) wait() { <-s.gone }

// serve runs on the parked thread and reports whether a child runs. v is
// the thread's visit to the group, nil when the child is moved in instead.
func (sp spawn) serve(r spawnReq, v *cgroup.Visit) bool {
	r.cmd.SysProcAttr.Ptrace = true
	r.cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := r.cmd.Start(); err != nil {
		r.started <- err
		return false
	}
	if err := sp.confine(r.cmd.Process.Pid, r.limits, r.group, v); err != nil {
		_ = r.cmd.Process.Kill()
		_ = unix.PtraceDetach(r.cmd.Process.Pid)
		_ = r.cmd.Wait()
		r.started <- err
		return false
	}
	r.started <- nil
	return true
}

// confine runs on the tracing thread while the child sits at its exec stop.
func (sp spawn) confine(pid int, limits *rlimits, group *cgroup.Handle, v *cgroup.Visit) error {
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
		return fmt.Errorf("wait for exec stop: %w", err)
	}
	if !ws.Stopped() || ws.StopSignal() != syscall.SIGTRAP {
		return fmt.Errorf("child did not stop at exec (status %#x)", uint32(ws))
	}
	if limits != nil {
		var errs []error
		set := func(res int, v uint64) {
			errs = append(errs, unix.Prlimit(pid, res, &unix.Rlimit{Cur: v, Max: v}, nil))
		}
		set(unix.RLIMIT_CORE, 0)
		set(unix.RLIMIT_NOFILE, limits.noFile)
		set(unix.RLIMIT_FSIZE, limits.fsize)
		if limits.cpu > 0 {
			set(unix.RLIMIT_CPU, limits.cpu)
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("prlimit: %w", err)
		}
	}
	if v != nil {
		group.Own(1) // born inside; this thread still counts in pids
	} else if sp.join {
		if err := group.Add(pid); err != nil {
			return err
		}
	}
	if err := unix.PtraceDetach(pid); err != nil {
		return fmt.Errorf("ptrace detach: %w", err)
	}
	return nil
}

// pipes are the workload's stdio: the child gets the far ends directly (no
// os/exec copy goroutines, so Wait never blocks on a daemon holding them).
type pipes struct {
	stdinR, stdinW   *os.File
	stdoutR, stdoutW *os.File
	stderrR, stderrW *os.File
}

func newPipes() (*pipes, error) {
	p := &pipes{}
	var err error
	if p.stdinR, p.stdinW, err = os.Pipe(); err != nil {
		return nil, err
	}
	if p.stdoutR, p.stdoutW, err = os.Pipe(); err != nil {
		p.close()
		return nil, err
	}
	if p.stderrR, p.stderrW, err = os.Pipe(); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// closeChildEnds closes wovyr's copies of the ends the child holds.
func (p *pipes) closeChildEnds() {
	for _, f := range []*os.File{p.stdinR, p.stdoutW, p.stderrW} {
		if f != nil {
			f.Close()
		}
	}
}

func (p *pipes) close() {
	for _, f := range []*os.File{p.stdinR, p.stdinW, p.stdoutR, p.stdoutW, p.stderrR, p.stderrW} {
		if f != nil {
			f.Close()
		}
	}
}
