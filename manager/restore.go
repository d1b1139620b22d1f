package manager

import (
	"context"
	"errors"
	"fmt"

	"github.com/wovyr/wovyr/sandbox"
)

// Restorer is the golden-snapshot path of one backend and template: with
// Prepare, the only path to a backend's sandboxes. It restores only on the
// backend the manager selected, so a pool's clones and its cold fallback
// share one backend and one floor.
type Restorer struct {
	sn   sandbox.Snapshotter
	tmpl sandbox.Template
	name string
}

// Restorer returns b's restorer for tmpl, or nil when b does not snapshot.
func (m *Manager) Restorer(b sandbox.Backend, tmpl sandbox.Template) *Restorer {
	sn, ok := b.(sandbox.Snapshotter)
	if !ok || len(tmpl.GPUs) > 0 { // a GPU template's sandboxes are cold: devices are no snapshot's
		return nil
	}
	return &Restorer{sn: sn, tmpl: tmpl, name: b.Name()}
}

// Golden returns the template's golden snapshot, capturing it if need be.
func (r *Restorer) Golden(ctx context.Context) (sandbox.Golden, error) {
	g, err := r.sn.Golden(ctx, r.tmpl)
	if err != nil && !errors.Is(err, sandbox.ErrNoSnapshot) && sandbox.ClassOf(err) == sandbox.BackendFailure {
		return nil, fmt.Errorf("golden snapshot on %s: %w", r.name, err)
	}
	return g, err
}

// Restore prepares a clone of g.
func (r *Restorer) Restore(ctx context.Context, g sandbox.Golden) (sandbox.Sandbox, error) {
	sb, err := r.sn.Restore(ctx, g)
	if err != nil && sandbox.ClassOf(err) == sandbox.BackendFailure {
		return nil, fmt.Errorf("restore on %s: %w", r.name, err)
	}
	return sb, err
}

// prepareOrRestore is the one-shot path's sandbox: a clone when b
// snapshots and its golden can be had (captured on first use), else a cold
// prepare on the same b.
func (m *Manager) prepareOrRestore(ctx context.Context, b sandbox.Backend, tmpl sandbox.Template) (sandbox.Sandbox, error) {
	if r := m.Restorer(b, tmpl); r != nil {
		g, err := r.Golden(ctx)
		if err == nil {
			sb, rerr := r.Restore(ctx, g)
			if rerr == nil {
				return sb, nil
			}
			err = rerr
		}
		if ctx.Err() != nil {
			return nil, err
		}
		if !errors.Is(err, sandbox.ErrNoSnapshot) {
			m.log.Warn("no clone; preparing cold on the same backend", "backend", b.Name(), "err", err)
		}
	}
	return m.Prepare(ctx, b, tmpl)
}
