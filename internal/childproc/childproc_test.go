package childproc

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestChildOutlivesTheThreadsOfItsStarter: a child with Pdeathsig started
// through Start survives goroutines that lock an OS thread and exit (each
// ends its thread); one started with a plain cmd.Start from a goroutine
// that then exits locked is killed — the positive control.
func TestChildOutlivesTheThreadsOfItsStarter(t *testing.T) {
	start := func(viaStart bool) (*exec.Cmd, <-chan error) {
		cmd := exec.Command("sleep", "30")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if viaStart {
			c, err := Start(cmd)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- c.Wait() }()
			return cmd, done
		}
		// The control: started from a goroutine that then exits locked,
		// as a thread-pinning goroutine elsewhere in wovyr would.
		done := make(chan error, 1)
		ok := make(chan error)
		go func() {
			runtime.LockOSThread()
			ok <- cmd.Start()
			go func() { done <- cmd.Wait() }()
		}()
		if err := <-ok; err != nil {
			t.Fatal(err)
		}
		return cmd, done
	}
	exitLockedThreads := func() {
		for range 64 {
			ch := make(chan struct{})
			go func() { runtime.LockOSThread(); close(ch) }()
			<-ch
		}
	}
	held, heldDone := start(true)
	control, controlDone := start(false)
	exitLockedThreads()
	select {
	case err := <-controlDone:
		if ws, ok := control.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("control ended with %v, want SIGKILL", err)
		}
	case <-time.After(5 * time.Second):
		control.Process.Kill()
		t.Fatal("control: a child whose starting thread exited was not killed; the test proves nothing")
	}
	select {
	case err := <-heldDone:
		t.Fatalf("child started through Start ended (%v) when other threads exited", err)
	case <-time.After(200 * time.Millisecond):
	}
	held.Process.Kill()
	<-heldDone
}
