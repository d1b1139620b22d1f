// Command traceme is issue #25's reproducer: its leader thread makes its
// parent its tracer (ptrace(PTRACE_TRACEME)), sends itself SIGUSR1, prints
// a line once the signal arrives and exits 7. Without a tracer, or with one
// that detaches, that is what it does; a parent that takes the ptrace-stop
// for an exit loses the exit code and the output.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
)

// init locks the main goroutine to the main thread, so the traced thread
// is the leader (tid == pid) and the signal goes to it.
func init() { runtime.LockOSThread() }

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGUSR1)
	_, _, errno := syscall.RawSyscall(syscall.SYS_PTRACE, syscall.PTRACE_TRACEME, 0, 0)
	fmt.Printf("traceme errno=%d\n", errno)
	if err := syscall.Tgkill(syscall.Getpid(), syscall.Gettid(), syscall.SIGUSR1); err != nil {
		fmt.Println("tgkill:", err)
	}
	<-c
	fmt.Println("got SIGUSR1")
	os.Exit(7)
}
