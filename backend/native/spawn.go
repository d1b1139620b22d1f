package native

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/cgroup"
)

// onThrowawayThread runs fn on an OS thread that dies afterwards.
//
// Network namespace, no_new_privs and credentials are per-thread in Linux
// and inherited by children forked from that thread. wovyr changes them on a
// locked thread, forks, and then lets the goroutine exit still locked, which
// makes the Go runtime terminate the thread: no tainted thread ever runs
// other goroutines.
//
// One exception: the runtime cannot terminate the main thread, so a locked
// goroutine that happens to run there leaves it parked instead — and the
// main thread's namespace and ids are what /proc/<pid>/ns/net and
// /proc/<pid>/status show for all of wovyr. So the namespace and real ids
// are put back too; no_new_privs cannot be, and is harmless on a parked
// thread.
//
// If fn succeeds and then is non-nil, then runs on the same thread after
// the namespace and ids are restored, before the thread exits.
func onThrowawayThread(fn func() error, then func()) error {
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
		if err == nil && then != nil {
			then()
		}
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
// instruction.
type spawn struct {
	netns      *os.File      // nil: stay in wovyr's namespace (positive controls only)
	group      *cgroup.Group // nil: no cgroup (positive controls only)
	limits     *rlimits      // nil: inherit wovyr's (positive controls only)
	uid, gid   uint32
	noNewPrivs bool
}

// start starts cmd confined: forked inside the sandbox's network namespace
// with no_new_privs, stopped at its execve (traced), given its rlimits and
// moved into its cgroup, then released. On error the child is killed. The
// returned channel delivers cmd.Wait's result.
//
// The forking thread stays alive, blocked in Wait, until the child exits:
// the child's parent-death signal (SIGKILL) fires when that *thread* exits,
// so if wovyr dies at any moment — even between exec and confinement —
// the workload dies with it. Its descendants are in the cgroup, which
// start-up reconciles.
func (sp spawn) start(cmd *exec.Cmd) (<-chan error, error) {
	cmd.SysProcAttr.Ptrace = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	exited := make(chan error, 1)
	err := onThrowawayThread(func() error {
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
		if err := cmd.Start(); err != nil {
			return err
		}
		if err := sp.confine(cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			_ = unix.PtraceDetach(cmd.Process.Pid)
			_ = cmd.Wait()
			return err
		}
		return nil
	}, func() { exited <- cmd.Wait() })
	return exited, err
}

// confine runs on the tracing thread while the child sits at its exec stop.
func (sp spawn) confine(pid int) error {
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
		return fmt.Errorf("wait for exec stop: %w", err)
	}
	if !ws.Stopped() || ws.StopSignal() != syscall.SIGTRAP {
		return fmt.Errorf("child did not stop at exec (status %#x)", uint32(ws))
	}
	// prlimit(2) on another process needs CAP_SYS_RESOURCE or matching real
	// ids. wovyr may lack the capability (it does in some containers), so
	// this thread takes the workload's real ids; its effective uid stays 0.
	keep := ^uintptr(0) // -1: leave unchanged
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(sp.gid), keep, keep); e != 0 {
		return fmt.Errorf("setresgid: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(sp.uid), keep, keep); e != 0 {
		return fmt.Errorf("setresuid: %w", e)
	}
	if sp.limits != nil {
		var errs []error
		set := func(res int, v uint64) {
			errs = append(errs, unix.Prlimit(pid, res, &unix.Rlimit{Cur: v, Max: v}, nil))
		}
		set(unix.RLIMIT_CORE, 0)
		set(unix.RLIMIT_NOFILE, sp.limits.noFile)
		set(unix.RLIMIT_FSIZE, sp.limits.fsize)
		if sp.limits.cpu > 0 {
			set(unix.RLIMIT_CPU, sp.limits.cpu)
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("prlimit: %w", err)
		}
	}
	if sp.group != nil {
		if err := sp.group.Add(pid); err != nil {
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
