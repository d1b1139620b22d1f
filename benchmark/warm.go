package benchmark

import (
	"context"
	"errors"

	"github.com/wovyr/wovyr/sandbox"
)

// Warm keeps sandboxes prepared ahead, as a pool does, so that a measured
// Run never includes Prepare; between rounds (Refill, a Pair's Setup) it
// destroys the used ones and tops the ready ones up. A run of any length
// thus holds no more sandboxes than a pool of Size would: holding
// thousands would make every fork in the process, the peer's included,
// copy their descriptors.
type Warm struct {
	ctx         context.Context
	prepare     func(context.Context) (sandbox.Sandbox, error)
	size        int
	ready, used []sandbox.Sandbox
}

// NewWarm returns a Warm of size sandboxes of b, prepared from tmpl.
func NewWarm(ctx context.Context, b sandbox.Backend, tmpl sandbox.Template, size int) *Warm {
	prepare := func(ctx context.Context) (sandbox.Sandbox, error) { return b.Prepare(ctx, tmpl) }
	return &Warm{ctx: ctx, prepare: prepare, size: max(size, 1)}
}

// Refill destroys the used sandboxes and prepares ready ones up to the size.
func (w *Warm) Refill() error {
	var errs []error
	for _, sb := range w.used {
		errs = append(errs, sb.Destroy(w.ctx))
	}
	w.used = w.used[:0]
	for len(w.ready) < w.size {
		sb, err := w.prepare(w.ctx)
		if err != nil {
			errs = append(errs, err)
			break
		}
		w.ready = append(w.ready, sb)
	}
	return errors.Join(errs...)
}

// Take returns a ready sandbox (nil if Refill has not made one), which
// counts as used from then on.
func (w *Warm) Take() sandbox.Sandbox {
	if len(w.ready) == 0 {
		return nil
	}
	sb := w.ready[len(w.ready)-1]
	w.ready = w.ready[:len(w.ready)-1]
	w.used = append(w.used, sb)
	return sb
}

// Close destroys every sandbox Warm holds.
func (w *Warm) Close() error {
	var errs []error
	for _, sb := range append(w.ready, w.used...) {
		errs = append(errs, sb.Destroy(w.ctx))
	}
	w.ready, w.used = nil, nil
	return errors.Join(errs...)
}
