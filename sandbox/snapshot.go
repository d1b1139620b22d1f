package sandbox

import (
	"context"
	"errors"
)

// Snapshotter is implemented by backends that capture golden snapshots of
// a template and restore clones from them (package snapshot), so that a
// cold start is a restore. A golden is captured from a sandbox no tenant
// code has run in, after the template's warm-up; a clone is never captured.
type Snapshotter interface {
	// Golden returns tmpl's golden snapshot: the one already in memory or
	// on disk while its key holds, else a fresh capture (as slow as a cold
	// Prepare, and more). ErrNoSnapshot means tmpl cannot be snapshotted
	// here; callers then prepare cold.
	Golden(ctx context.Context, tmpl Template) (Golden, error)
	// Restore prepares a clone of g: a warm, tenant-neutral sandbox as
	// Prepare returns, made unique (RNG, identity, clock) before it is
	// returned. A failed restore leaves nothing behind.
	Restore(ctx context.Context, g Golden) (Sandbox, error)
}

// Golden is a backend's handle to one golden snapshot.
type Golden interface {
	// ID is the snapshot's key digest (snapshot.Key.ID).
	ID() string
	// Valid is false once the backend has invalidated the snapshot (its
	// key no longer holds, or a restore found it damaged); callers drop it
	// and ask Golden again.
	Valid() bool
}

// ErrNoSnapshot says a template cannot be snapshotted by this backend.
var ErrNoSnapshot = errors.New("this template cannot be snapshotted here")

// Pauser is implemented by sandboxes that can be saved while a tenant owns
// them and resumed later, for that tenant only: a session's idle pause.
// Unlike a golden snapshot a paused sandbox holds the tenant's state, so it
// is stored under its tenant (0600, package snapshot), never restored for
// anyone else, and never used by a pool.
type Pauser interface {
	// Pause saves the sandbox for tenant and stops it; the sandbox is then
	// spent (Destroy still releases what is left). A sandbox that ran
	// another tenant's code is refused with ErrWrongTenant.
	Pause(ctx context.Context, tenant string) (Paused, error)
}

// Resumer is implemented by backends whose sandboxes pause.
type Resumer interface {
	// Resume restores p for tenant into a sandbox that runs that tenant's
	// invocations only; p stays until Discard, so a resume that fails
	// after the restore loses nothing. Another tenant gets ErrWrongTenant
	// (a BadInput) and nothing is restored.
	Resume(ctx context.Context, p Paused, tenant string) (Sandbox, error)
	// Discard deletes p (its session ended while paused); a missing one
	// is not an error.
	Discard(ctx context.Context, p Paused) error
	// PausedSandboxes lists the paused sandboxes the backend keeps, for a
	// start-up that discards those no session owns.
	PausedSandboxes(ctx context.Context) ([]Paused, error)
}

// Paused names a paused sandbox in its backend's store.
type Paused struct {
	Backend string `json:"backend"`
	ID      string `json:"id"`
	// Bytes is the size of its files, as Pause reported it (zero in a
	// listing).
	Bytes int64 `json:"bytes,omitempty"`
}

// PausedOf names the paused sandboxes of backend that ids lists.
func PausedOf(backend string, ids func(backend string) ([]string, error)) ([]Paused, error) {
	list, err := ids(backend)
	if err != nil {
		return nil, err
	}
	out := make([]Paused, len(list))
	for i, id := range list {
		out[i] = Paused{Backend: backend, ID: id}
	}
	return out, nil
}

// ErrWrongTenant says a tenant-bound sandbox or snapshot belongs to another
// tenant.
var ErrWrongTenant = errors.New("this sandbox belongs to another tenant")
