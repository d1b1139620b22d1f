package native

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Network namespaces are per thread in Linux. wovyr makes a sandbox's empty
// namespace at Prepare by unsharing on a locked thread and keeping an fd
// (no bind mount, so nothing outlives a crash), and at Run forks the child
// from a locked thread that has entered it. Both leave the thread back in
// wovyr's own namespace, or locked forever (it then dies with its goroutine).

// newNetns returns an fd for a fresh network namespace holding only a
// loopback interface (down): a process in it has no route anywhere.
func newNetns(home *os.File) (*os.File, error) {
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("unshare netns: %w", err)
	}
	f, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if rerr := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); rerr != nil {
		if f != nil {
			f.Close()
		}
		return nil, fmt.Errorf("return to home netns: %w", rerr) // thread stays locked
	}
	runtime.UnlockOSThread()
	if err != nil {
		return nil, fmt.Errorf("open netns: %w", err)
	}
	return f, nil
}

// inNetns runs fn on the current (already locked) thread inside ns.
func inNetns(ns, home *os.File, fn func() error) error {
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter netns: %w", err)
	}
	err := fn()
	if rerr := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); rerr != nil {
		runtime.LockOSThread() // never unlocked: the thread dies with its goroutine
		return fmt.Errorf("return to home netns: %w", rerr)
	}
	return err
}
