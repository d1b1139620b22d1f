// Package childproc starts child processes that must die with wovyr, and
// only with wovyr.
//
// # Why a thread is held
//
// wovyr's children that must not outlive it (QEMU, OCI runtime calls) are
// started with PR_SET_PDEATHSIG. Linux sends that signal when the *thread*
// that forked the child exits, not the process — and the Go runtime ends
// an OS thread whenever a goroutine locked to it returns without unlocking,
// which wovyr does on purpose elsewhere (a gVisor sandbox born on one CPU,
// native's parked spawner threads, namespace switches). A child started
// from an ordinary goroutine shares its thread with whatever runs there
// later, so such a goroutine's exit killed a warm VM at a moment nobody
// chose: the next claim then failed with "send job: broken pipe".
//
// Start therefore forks from a goroutine locked to its thread and keeps it
// locked, blocked in wait(2), until the child is gone: one OS thread per
// live child.
package childproc

import (
	"os/exec"
	"runtime"
)

// Child is a process started by Start.
type Child struct {
	done chan struct{}
	err  error
}

// Done is closed once the child has exited and been reaped.
func (c *Child) Done() <-chan struct{} { return c.done }

// Wait waits for the child to exit and returns what cmd.Wait returned.
func (c *Child) Wait() error {
	<-c.done
	return c.err
}

// Start starts cmd from a thread that stays alive until cmd has exited.
// Callers must not call cmd.Wait themselves: use the Child's.
func Start(cmd *exec.Cmd) (*Child, error) {
	started := make(chan error, 1)
	c := &Child{done: make(chan struct{})}
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.err = cmd.Wait()
		close(c.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return c, nil
}
