package oci

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/wovyr/wovyr/hostlock"
	"github.com/wovyr/wovyr/idmap"
)

// Ownership between processes is expressed with host-wide flock(2) locks
// (package hostlock): a sandbox's lock file is held for its whole life, so
// Reconcile can tell a live sandbox of another wovyr process from a
// leftover of a crashed one.

// slot is one host uid/gid range, held exclusively by one live sandbox.
type slot struct {
	n    int
	ids  idmap.Range
	lock *os.File
}

// slotLocks is where uid-range locks live: host-wide, not in a state
// directory, so that two daemons (or test runs) with different state
// directories never hand the same host uids to two live sandboxes.
const slotLocks = "/run/wovyr/oci-slots"

// acquireSlot takes the first free range of those starting at base. Ranges
// are distinct between live sandboxes of every wovyr process on the host.
func acquireSlot(base uint32, slots int) (*slot, error) {
	dir := filepath.Join(slotLocks, strconv.FormatUint(uint64(base), 10))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	for n := range slots {
		f, err := hostlock.Try(filepath.Join(dir, fmt.Sprintf("%d.lock", n)), hostlock.Exclusive)
		if err != nil {
			return nil, err
		}
		if f == nil {
			continue
		}
		start := base + uint32(n)*rangeSize
		return &slot{n: n, ids: idmap.Range{HostUID: start, HostGID: start, Size: rangeSize}, lock: f}, nil
	}
	return nil, fmt.Errorf("all %d uid ranges are in use", slots)
}

func (s *slot) release() {
	if s != nil && s.lock != nil {
		s.lock.Close() // closing drops the flock
		s.lock = nil
	}
}
