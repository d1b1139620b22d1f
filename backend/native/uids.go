package native

import (
	"errors"
	"sync"
)

// Each live native sandbox runs as its own host uid (and gid of the same
// number) from a dedicated range, so that two tenants' processes can neither
// signal nor trace each other nor read each other's 0700 workspaces, and
// per-uid kernel limits are not shared (BATTERY 45, 48, 49).
const (
	// DefaultUIDBase is the first uid of the native range. It sits far
	// above login accounts and below the ranges user namespaces are
	// usually given.
	DefaultUIDBase = 900000
	// DefaultUIDCount bounds concurrent native sandboxes.
	DefaultUIDCount = 4096
)

var errNoUID = errors.New("native: every sandbox uid is in use")

// uidRange hands out uids from [base, base+n).
type uidRange struct {
	mu   sync.Mutex
	base uint32
	used []bool
	next int
}

func newUIDRange(base uint32, n int) *uidRange {
	return &uidRange{base: base, used: make([]bool, n)}
}

func (r *uidRange) get() (uint32, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.used {
		j := (r.next + i) % len(r.used)
		if !r.used[j] {
			r.used[j] = true
			// Round-robin, so a uid just freed is the last one reused:
			// nothing of its previous tenant can still be running under it.
			r.next = j + 1
			return r.base + uint32(j), nil
		}
	}
	return 0, errNoUID
}

func (r *uidRange) put(uid uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i := int(uid - r.base); uid >= r.base && i < len(r.used) {
		r.used[i] = false
	}
}
