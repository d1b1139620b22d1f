// Package hostlock is how wovyr processes on one host tell each other what
// is theirs: advisory flock(2) locks on files, which the kernel drops when
// the holder dies. A live sandbox holds its locks for its whole life, so a
// second daemon (or a test run with its own state directory) never hands
// out the same host ids, and a reconcile can tell a live sandbox of another
// process from the leftover of a crashed one. Lock files are never unlinked
// while in use: a new file at the same path would be a second, unrelated
// lock.
package hostlock

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// Mode is the kind of lock.
type Mode int

const (
	Exclusive Mode = unix.LOCK_EX
	Shared    Mode = unix.LOCK_SH
)

// Try opens (creating, mode 0600) path and takes a lock of kind m without
// waiting. It returns nil, nil if another holder has it.
func Try(path string, m Mode) (*os.File, error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), int(m)|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, err
	}
	return f, nil
}

// Wait is Try that waits for the lock.
func Wait(path string, m Mode) (*os.File, error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), int(m)); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func open(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
}
