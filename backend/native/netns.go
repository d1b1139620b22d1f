package native

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// newNetns returns an fd for a fresh network namespace holding only a
// loopback interface (down): a process in it has no route anywhere. The
// fd, not a bind mount, keeps it alive, so nothing outlives a crash.
func newNetns() (*os.File, error) {
	var f *os.File
	err := onThrowawayThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare netns: %w", err)
		}
		var err error
		f, err = os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		return err
	})
	return f, err
}
