package pool

import (
	"context"
	"errors"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// Acquire leases a sandbox: a warm one if there is one, else a new one from
// the factory, waiting for a free slot while MaxLive sandboxes are live.
// While it waits, a sandbox that comes back warm is taken too. A cancelled
// or expired ctx ends the wait with a Killed or Timeout error and leaves
// the slot count as it was. On a stalled pool it fails at once with
// ErrStalled and the template's typed error. The caller must Release the
// lease.
func (p *Pool) Acquire(ctx context.Context) (*Lease, error) {
	start := time.Now()
	if p.shut.Load() {
		return nil, p.closedErr()
	}
	if st := p.stall.Load(); st != nil {
		p.m.AcquireErrors.Add(1)
		return nil, p.stalledErr(st)
	}
	p.arrivals.Add(1)
	select {
	case sb := <-p.warm:
		p.m.Hits.Add(1)
		return p.lease(sb, true, start), nil
	default:
	}
	p.misses.Add(1)
	p.m.Misses.Add(1)
	if err := ctx.Err(); err != nil {
		p.m.AcquireErrors.Add(1)
		return nil, p.ctxErr(err)
	}
	if !p.sem.TryAcquire(1) {
		sb, err := p.wait(ctx)
		if err != nil {
			p.m.AcquireErrors.Add(1)
			return nil, err
		}
		if sb != nil {
			return p.lease(sb, true, start), nil
		}
	} else {
		p.tookSlot()
	}
	sb, err := p.create(ctx)
	if err != nil {
		p.m.AcquireErrors.Add(1)
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, errors.Join(p.ctxErr(ctxErr), err)
		}
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		// The caller gave up while it was being made: keep it warm.
		if !p.pushWarm(sb) {
			p.discard(ctx, sb)
		}
		p.m.AcquireErrors.Add(1)
		return nil, p.ctxErr(err)
	}
	return p.lease(sb, false, start), nil
}

// AcquireFrom leases a sandbox that make builds outside the pool's
// factory (a session's paused sandbox, restored) in one of the pool's
// slots: it waits for a free slot as Acquire does, never takes a warm
// sandbox, and counts as a cold acquire. Release destroys the sandbox or
// resets it as after any use. A failed make frees the slot and does not
// count against the pool's backend (the saved sandbox is the caller's).
func (p *Pool) AcquireFrom(ctx context.Context, make func(context.Context) (sandbox.Sandbox, error)) (*Lease, error) {
	start := time.Now()
	if p.shut.Load() {
		return nil, p.closedErr()
	}
	if err := p.sem.Acquire(ctx, 1); err != nil {
		p.m.AcquireErrors.Add(1)
		return nil, p.ctxErr(ctx.Err())
	}
	p.tookSlot()
	if p.shut.Load() {
		p.freeSlot()
		return nil, p.closedErr()
	}
	sb, err := make(ctx)
	if err == nil && sb == nil {
		err = errors.New("pool: AcquireFrom: no sandbox was made")
	}
	if err != nil {
		p.freeSlot()
		p.m.AcquireErrors.Add(1)
		return nil, err
	}
	l := p.lease(sb, false, start)
	l.st.foreign = true
	return l, nil
}

// wait blocks until a slot frees (it returns nil, nil and the caller holds
// the slot), a sandbox comes back warm (it returns it), ctx ends or the pool
// closes. The semaphore wait runs in a goroutine because it cannot select
// on the warm channel; when the warm channel wins, the goroutine's wait is
// cancelled and any slot it got anyway is given back.
func (p *Pool) wait(ctx context.Context) (sandbox.Sandbox, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan error, 1)
	go func() { got <- p.sem.Acquire(wctx, 1) }()
	abandon := func() {
		cancel()
		if <-got == nil {
			p.sem.Release(1)
		}
	}
	select {
	case err := <-got:
		if err != nil {
			return nil, p.ctxErr(ctx.Err())
		}
		p.tookSlot()
		if p.shut.Load() {
			p.freeSlot()
			return nil, p.closedErr()
		}
		return nil, nil
	case sb := <-p.warm:
		abandon()
		return sb, nil
	case <-p.done:
		abandon()
		return nil, p.closedErr()
	}
}

// ctxErr types a context error: a deadline is a Timeout, anything else Killed.
func (p *Pool) ctxErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return sandbox.Wrap(sandbox.Timeout, err, "pool %s: acquire", p.cfg.Key)
	}
	return sandbox.Wrap(sandbox.Killed, err, "pool %s: acquire", p.cfg.Key)
}
