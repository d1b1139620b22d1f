package agent

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/sandbox"
)

// LeaderExitUntraced is the exit status RunLeader reports for a leader
// that was still stopped when it returned (stopIsExit, the positive
// control only): a status no exit or signal death yields.
const LeaderExitUntraced = 255

// RunLeader runs one job's leader, prog with argv, as the child of the
// calling process, and returns the exit status to leave with: the
// leader's own, or 128+n for a death by signal n (what an OCI runtime
// reports for its init). nproc, if positive, is the job's RLIMIT_NPROC;
// this process's threads are added to it, as SetRlimits does. The leader
// inherits the environment, working directory and descriptors 0–2.
//
// # Why a one-shot container runs its job under this
//
// A one-shot runc/crun container used to run the job as its init (ADR
// 0012). The init's parent is then the runtime itself, so a job that calls
// ptrace(PTRACE_TRACEME) makes crun its tracer: its next signal stops it,
// crun never resumes it, and it sat stopped until its wall limit (issue
// #25). Here the parent is wovyr's own process, which detaches at the
// first ptrace-stop (WaitUntraced) as the agent does, so the job behaves as
// on every other tier, and as a pid namespace's second process its own
// signals with the default action act on it as they would anywhere else.
//
// The caller is the sandbox's init: every signal the job may send it is
// caught and dropped (an init's default-action signals from inside its
// namespace are not delivered, but the Go runtime installs handlers, and
// one would end this process and with it the job); its own is not
// dumpable (Harden), so the job, the same uid, cannot ptrace it.
func RunLeader(prog string, argv []string, nproc int, stopIsExit bool) int {
	signal.Notify(make(chan os.Signal, 1))
	if err := Harden(); err != nil {
		return startFailed(err.Error())
	}
	ReserveThreads()
	if nproc > 0 {
		if err := SetRlimits([]Rlimit{{Resource: unix.RLIMIT_NPROC, Cur: uint64(nproc), Max: uint64(nproc)}}); err != nil {
			return startFailed(err.Error())
		}
	}
	var ws syscall.WaitStatus
	var ru syscall.Rusage
	started := make(chan forked, 1)
	// Not the agent's own group or session: the host kills a one-shot
	// sandbox through its cgroup, and the job keeps the init's stdio.
	attr := &syscall.ProcAttr{Env: syscall.Environ(), Files: []uintptr{0, 1, 2}}
	forkAndWait(prog, argv, attr, started, &ws, &ru, stopIsExit)
	if f := <-started; f.err != nil {
		return startFailed(fmt.Sprintf("fork/exec %s: %v", prog, f.err))
	}
	switch {
	case ws.Signaled():
		return 128 + int(ws.Signal())
	case ws.Exited():
		return ws.ExitStatus()
	default:
		return LeaderExitUntraced
	}
}

// startFailed reports a job that could not start as the host reports one
// (exit 127, a "wovyr: …" line on stderr).
func startFailed(why string) int {
	_, _ = os.Stderr.Write(sandbox.NotStartedLine(why))
	return 127
}
