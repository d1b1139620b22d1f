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

// rlimits applied to every workload before its first instruction.
type rlimits struct {
	noFile uint64
	fsize  uint64
	cpu    uint64 // seconds; zero means unset
}

// startConfined starts cmd stopped at its execve (traced), applies rl and
// moves it into g, then lets it run. On error the child is killed.
//
// ptrace ties the tracee to the tracing thread, so the whole sequence runs
// on one locked OS thread.
func startConfined(cmd *exec.Cmd, g *cgroup.Group, rl rlimits, uid, gid uint32, netns, home *os.File) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd.SysProcAttr.Ptrace = true
	// The child is forked inside the sandbox's network namespace.
	if err := inNetns(netns, home, cmd.Start); err != nil {
		return err
	}
	pid := cmd.Process.Pid
	fail := func(err error) error {
		_ = cmd.Process.Kill()
		_ = unix.PtraceDetach(pid)
		_ = cmd.Wait()
		return err
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
		return fail(fmt.Errorf("wait for exec stop: %w", err))
	}
	if !ws.Stopped() || ws.StopSignal() != syscall.SIGTRAP {
		return fail(fmt.Errorf("child did not stop at exec (status %#x)", uint32(ws)))
	}
	var errs []error
	set := func(res int, v uint64) {
		errs = append(errs, unix.Prlimit(pid, res, &unix.Rlimit{Cur: v, Max: v}, nil))
	}
	err := asRealIDs(uid, gid, func() error {
		set(unix.RLIMIT_CORE, 0)
		set(unix.RLIMIT_NOFILE, rl.noFile)
		set(unix.RLIMIT_FSIZE, rl.fsize)
		if rl.cpu > 0 {
			set(unix.RLIMIT_CPU, rl.cpu)
		}
		return errors.Join(errs...)
	})
	if err != nil {
		return fail(fmt.Errorf("prlimit: %w", err))
	}
	if err := g.Add(pid); err != nil {
		return fail(err)
	}
	if err := unix.PtraceDetach(pid); err != nil {
		return fail(fmt.Errorf("ptrace detach: %w", err))
	}
	return nil
}

// asRealIDs runs fn with this OS thread's real uid and gid set to the
// workload's. prlimit(2) on another process needs CAP_SYS_RESOURCE or
// matching real ids; wovyr may lack the capability (it does in some
// containers), so it borrows the ids on the locked thread alone — raw
// syscalls, not syscall.Setuid, which would change every thread. The
// effective uid stays 0 throughout, so the switch back cannot fail for lack
// of privilege; if it fails anyway the thread stays locked and dies with its
// goroutine rather than serve others with the wrong ids.
func asRealIDs(uid, gid uint32, fn func() error) error {
	if uid == uint32(os.Getuid()) && gid == uint32(os.Getgid()) {
		return fn()
	}
	keep := ^uintptr(0) // -1: leave unchanged
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), keep, keep); e != 0 {
		return fmt.Errorf("setresgid: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), keep, keep); e != 0 {
		unix.RawSyscall(unix.SYS_SETRESGID, uintptr(os.Getgid()), keep, keep)
		return fmt.Errorf("setresuid: %w", e)
	}
	err := fn()
	_, _, e1 := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(os.Getuid()), keep, keep)
	_, _, e2 := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(os.Getgid()), keep, keep)
	if e1 != 0 || e2 != 0 {
		// Never hand this thread back to the scheduler.
		runtime.LockOSThread()
		return fmt.Errorf("restore thread ids: %v %v", e1, e2)
	}
	return err
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
