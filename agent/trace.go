package agent

import (
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// forked is the outcome of the leader's fork: its pid, or why it failed.
type forked struct {
	pid int
	tid int // the forking thread, which ends with the job (threadGone)
	err error
}

// threadGone waits, briefly, until the agent's thread tid has exited. The
// forking thread is locked and never unlocked, so the runtime ends it once
// its goroutine returns, a moment after the job was reaped; the next job's
// RLIMIT_NPROC counts the agent's threads (SetRlimits), and a thread still
// ending then would give that job one task more than its limit once gone.
func threadGone(tid int) {
	p := "/proc/self/task/" + strconv.Itoa(tid)
	for deadline := time.Now().Add(100 * time.Millisecond); time.Now().Before(deadline); {
		if _, err := os.Stat(p); err != nil {
			return
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// forkAndWait starts the job's leader, sends its pid (or the fork's error)
// on started, and waits until the leader has exited, setting ws and ru.
//
// # Why one locked thread
//
// A leader that calls ptrace(PTRACE_TRACEME) makes its parent *thread* its
// tracer (diagnostic tools that sweep syscalls do it). Its next signal then
// stops it, and the tracer's wait reports that stop as if it were an exit:
// the job ended with exit code -1 and lost its output (issue #25). A
// ptrace-stop is not an exit, and the agent must never be a working tracer
// of the workload, so the waiter detaches at the first stop, handing the
// job the signal it stopped with, and the job runs on untraced, as it would
// with no tracer at all. Only the tracer thread may detach: the fork and
// every wait happen on this goroutine's locked OS thread, which is never
// unlocked, so it ends with the goroutine (a tracer's exit would detach
// the tracee too).
func forkAndWait(prog string, argv []string, attr *syscall.ProcAttr, started chan<- forked, ws *syscall.WaitStatus, ru *syscall.Rusage, stopIsExit bool) {
	runtime.LockOSThread()
	pid, err := syscall.ForkExec(prog, argv, attr)
	started <- forked{pid, syscall.Gettid(), err}
	if err != nil {
		return
	}
	_ = WaitUntraced(pid, ws, ru, stopIsExit)
}

// WaitUntraced waits until the child pid has exited, setting ws and ru;
// at each ptrace-stop of a child that made its parent its tracer
// (PTRACE_TRACEME) it detaches, so the child runs on untraced (see
// forkAndWait). It must run on the thread that forked pid: only the
// tracer may detach. The native backend's forking thread uses it too.
// stopIsExit returns at the first stop instead (the behaviour before the
// fix): battery row 94's positive control only.
func WaitUntraced(pid int, ws *syscall.WaitStatus, ru *syscall.Rusage, stopIsExit bool) error {
	for {
		_, err := syscall.Wait4(pid, ws, 0, ru)
		if err == syscall.EINTR {
			continue
		}
		if err == nil && ws.Stopped() && !stopIsExit {
			detach(pid, ws.StopSignal())
			continue
		}
		return err
	}
}

// detach ends a ptrace relation the leader started, delivering sig unless
// it is the SIGTRAP the kernel sends a PTRACE_TRACEME'd process after each
// execve (which without a tracer never happens, and would kill it).
func detach(pid int, sig syscall.Signal) {
	if sig == syscall.SIGTRAP {
		sig = 0
	}
	_, _, _ = unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(pid), 0, uintptr(sig), 0, 0)
}
