package manager

import (
	"context"
	"errors"

	"github.com/wovyr/wovyr/sandbox"
)

// A paused sandbox (sandbox.Pauser) comes back only through the manager,
// as every sandbox does: on the backend that saved it, for the tenant
// that owns it, and only while that backend may hold the policy (Holds) —
// a resume is a claim like any other, never a way around the floor.

// Resume restores the paused sandbox p of tenant on b, which must be the
// backend that saved it, if b may still hold policy p for kind. The
// floor's refusal is a FloorError; a backend that keeps no paused
// sandboxes is a BadInput.
func (m *Manager) Resume(ctx context.Context, b sandbox.Backend, pol sandbox.Policy, kind sandbox.WorkloadKind, p sandbox.Paused, tenant string) (sandbox.Sandbox, error) {
	r, ok := b.(sandbox.Resumer)
	if !ok || p.Backend != b.Name() {
		return nil, sandbox.Errorf(sandbox.BadInput, "paused.backend", "backend %s cannot resume a paused %q sandbox", b.Name(), p.Backend)
	}
	if err := m.Holds(ctx, b, pol, kind); err != nil {
		return nil, err
	}
	return r.Resume(ctx, p, tenant)
}

// Discard deletes the paused sandbox p from the backend that keeps it.
func (m *Manager) Discard(ctx context.Context, p sandbox.Paused) error {
	b, ok := m.Backend(p.Backend)
	if !ok {
		return sandbox.Errorf(sandbox.BadInput, "paused.backend", "no backend %q", p.Backend)
	}
	r, ok := b.(sandbox.Resumer)
	if !ok {
		return sandbox.Errorf(sandbox.BadInput, "paused.backend", "backend %s keeps no paused sandboxes", p.Backend)
	}
	return r.Discard(ctx, p)
}

// ReconcilePaused discards every paused sandbox a backend keeps that keep
// does not name: those of sessions that ended, or were resumed, while
// their discard failed or the daemon was down.
func (m *Manager) ReconcilePaused(ctx context.Context, keep map[sandbox.Paused]bool) error {
	var errs []error
	for _, b := range m.backends {
		r, ok := b.(sandbox.Resumer)
		if !ok {
			continue
		}
		list, err := r.PausedSandboxes(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, p := range list {
			if !keep[p] {
				errs = append(errs, r.Discard(ctx, p))
			}
		}
	}
	return errors.Join(errs...)
}
