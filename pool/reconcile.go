package pool

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/wovyr/wovyr/autoscale"
	"github.com/wovyr/wovyr/sandbox"
)

// Reconcile moves the pool toward its autoscale target: it observes what
// happened since the previous call, asks the policy for a decision at now
// (the caller's clock value) and carries it out — destroying surplus warm
// sandboxes and creating new ones in parallel, waiting for them; a
// stalled pool creates nothing until a retry is due (see Stall). ctx bounds
// the creates. The server calls it periodically; the pool has no timer of
// its own. The error joins the failed creates and destroys.
func (p *Pool) Reconcile(ctx context.Context, now time.Time) error {
	return p.reconcile(ctx, now)()
}

// reconcile decides and starts what Reconcile does, and returns a func
// that waits for the creates it started and returns Reconcile's error.
// Decisions are serialised; creates are not: the next decision counts the
// ones still under way (autoscale.Observation.Creating), so a sandbox
// claimed while a slow refill runs is replaced at the next decision, not
// after the whole refill, and none is created twice.
func (p *Pool) reconcile(ctx context.Context, now time.Time) (finish func() error) {
	p.rec.Lock()
	defer p.rec.Unlock()
	if p.shut.Load() {
		err := p.closedErr()
		return func() error { return err }
	}
	var errs []error
	if st := p.stall.Load(); st != nil {
		ok, err := p.reconcileStalled(ctx, st, now)
		if errs = append(errs, err); !ok {
			return func() error { return p.reconcileErr(errs) }
		}
	}
	o := autoscale.Observation{
		Now:        now,
		Arrivals:   int(p.arrivals.Swap(0)),
		Misses:     int(p.misses.Swap(0)),
		Warm:       len(p.warm),
		Creating:   int(p.creating.Load()),
		Room:       max(0, p.cfg.MaxLive-int(p.live.Load())),
		FailStreak: int(p.streak.Load()),
	}
	var d autoscale.Decision
	prev := p.state.Breaker
	p.state, d = p.policy.Step(p.state, o)
	p.target.Store(int64(d.Target))
	p.breaker.Store(int64(d.Breaker))
	if d.Breaker != prev {
		p.log.Warn("breaker "+d.Breaker.String(), "fail_streak", o.FailStreak, "retry_at", p.state.RetryAt)
	}

	for range d.Destroy {
		select {
		case sb := <-p.warm:
			errs = append(errs, p.discard(ctx, sb))
			continue
		default:
		}
		break
	}

	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	for range d.Create {
		if !p.sem.TryAcquire(1) {
			break // acquirers are waiting or the bound is reached
		}
		p.tookSlot()
		p.creating.Add(1)
		wg.Go(func() {
			// Warm before it stops counting as under way: the next
			// decision may briefly see it twice (and create less), never
			// not at all.
			defer p.creating.Add(-1)
			sb, err := p.create(ctx)
			if err == nil && !p.pushWarm(sb) {
				err = p.discard(ctx, sb)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	return func() error {
		wg.Wait() // the creates' appends to errs happen before it returns
		return p.reconcileErr(errs)
	}
}

func (p *Pool) reconcileErr(errs []error) error {
	if err := errors.Join(errs...); err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "pool %s: reconcile", p.cfg.Key)
	}
	return nil
}
