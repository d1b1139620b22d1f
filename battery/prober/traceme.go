package prober

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"
)

// init locks the main goroutine to the main thread when this process is
// the traceme probe, so that the thread that calls PTRACE_TRACEME is the
// leader (tid == pid): only the leader's stop reaches a waiter of the pid.
// Locking in init is the one way to be on the main thread.
func init() {
	if len(os.Args) > 2 && os.Args[1] == "probe" && os.Args[2] == "traceme" {
		runtime.LockOSThread()
	}
}

// TracemeExit is the traceme probe's exit code.
const TracemeExit = 7

// traceme is battery row 94's workload (issue #25 item 1); see Traceme.
// Its lines go to stdout before the report, so the host sees whether the
// output survived.
func traceme([]string) Report {
	Traceme()
	return Report{Exit: TracemeExit, Data: map[string]string{"leader": fmt.Sprint(syscall.Gettid() == syscall.Getpid())}}
}

// Traceme is the self-tracing leader: it makes its parent its tracer,
// sends itself SIGUSR1 and prints a line once the signal arrives. The
// caller must be on the leader thread (LockOSThread in an init) and then
// exits TracemeExit. agent/testdata/traceme is this as a tool of its own.
func Traceme() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGUSR1)
	_, _, errno := syscall.RawSyscall(syscall.SYS_PTRACE, syscall.PTRACE_TRACEME, 0, 0)
	fmt.Printf("traceme errno=%d\n", errno)
	if err := syscall.Tgkill(syscall.Getpid(), syscall.Gettid(), syscall.SIGUSR1); err != nil {
		fmt.Println("tgkill:", err)
	}
	select {
	case <-c:
		fmt.Println("got SIGUSR1")
	case <-time.After(10 * time.Second):
		fmt.Println("no SIGUSR1")
	}
}
