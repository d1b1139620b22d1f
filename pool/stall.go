package pool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// ErrStalled is in the error of an Acquire on a stalled pool, beside the
// factory's own typed error (its class is BadInput).
var ErrStalled = errors.New("pool stalled: its template cannot be prepared")

// Check says cheaply, without side effects, whether the pool's template
// can be prepared now (a backend's sandbox.ImageChecker); nil if so.
type Check func() error

// Stall is why a pool stopped refilling: its factory failed with a
// permanent error, one that retrying the same template cannot mend.
//
// # Why a stall and not the breaker
//
// The breaker retries one create per back-off, up to a minute apart, for
// ever: right for a runtime that may come back, a waste of a prepare (a VM
// boot) per minute — and a warning a minute in the log — for a template the
// node lacks (issue #25: 16 failures in a daemon's log). A stalled pool
// prepares nothing, fails Acquire at once with the typed reason, and tries
// one create again only when the condition can have changed: its Check
// passes where it failed at the stall (the image was built), Resume is
// called (the operator re-certified or re-probed), or StallRetry passed
// (whatever changed that no check sees).
type Stall struct {
	Err   error     // the factory's error
	Since time.Time // when the factory failed
	// RetryAt is when Reconcile tries one create again; zero until the
	// first Reconcile after Since sets it from that Reconcile's clock.
	RetryAt time.Time
	// checked: Check refused the template too, so Check passing means
	// the template changed.
	checked bool
	resumed bool // Resume was called: retry at the next Reconcile
}

// Permanent reports whether a factory error can never pass by retrying the
// same template: a bad-input error. A template is tenant-neutral, so bad
// input at Prepare is the template's own fault (an image the node lacks, a
// kind the backend does not run). Anything else (a runtime failing, a VM
// that does not boot) may pass, and is left to the breaker.
func Permanent(err error) bool { return sandbox.ClassOf(err) == sandbox.BadInput }

// Class is the class of the factory's error: the stall's stable reason.
func (s *Stall) Class() sandbox.Class { return sandbox.ClassOf(s.Err) }

// Field is the template field at fault, e.g. "template.image".
func (s *Stall) Field() string { return sandbox.FieldOf(s.Err) }

// stallOn records a permanent factory failure; called by create.
func (p *Pool) stallOn(err error) {
	st := &Stall{Err: err, Since: time.Now()}
	st.checked = p.cfg.Check != nil && p.cfg.Check() != nil
	if p.stall.Swap(st) == nil {
		p.log.Warn("pool stalled: its template cannot be prepared; not refilling", "err", err, "class", st.Class(), "field", st.Field())
	}
}

// stalledErr is an Acquire's answer while the pool is stalled: ErrStalled
// and the factory's typed error.
func (p *Pool) stalledErr(st *Stall) error {
	return fmt.Errorf("pool %s: %w: %w", p.cfg.Key, ErrStalled, st.Err)
}

// Resume makes a stalled pool try one create at its next Reconcile, as the
// operator's sign that something changed (a re-certification, a re-probe).
// It is a no-op on a pool that is not stalled.
func (p *Pool) Resume() {
	if st := p.stall.Load(); st != nil {
		c := *st
		c.resumed = true
		p.stall.CompareAndSwap(st, &c)
	}
}

// reconcileStalled is Reconcile for a stalled pool: it destroys the warm
// sandboxes (none is handed out while stalled) and, when a retry is due,
// tries one create. It reports whether the pool is no longer stalled, so
// that Reconcile goes on as usual.
func (p *Pool) reconcileStalled(ctx context.Context, st *Stall, now time.Time) (bool, error) {
	var errs []error
	for {
		select {
		case sb := <-p.warm:
			errs = append(errs, p.discard(ctx, sb))
			continue
		default:
		}
		break
	}
	if st.RetryAt.IsZero() && !st.resumed {
		c := *st
		c.RetryAt = now.Add(p.cfg.StallRetry)
		p.stall.CompareAndSwap(st, &c)
		return false, errors.Join(errs...)
	}
	due := st.resumed || !now.Before(st.RetryAt)
	if !due && (!st.checked || p.cfg.Check() != nil) {
		return false, errors.Join(errs...)
	}
	if !p.sem.TryAcquire(1) {
		return false, errors.Join(errs...)
	}
	p.tookSlot()
	p.log.Info("stalled pool: trying one create", "since", st.Since, "retry_due", due)
	sb, err := p.create(ctx)
	if err == nil && !p.pushWarm(sb) {
		err = p.discard(ctx, sb)
	}
	if err != nil {
		if next := p.stall.Load(); next != nil && next != st {
			return false, errors.Join(errs...) // stalled again: quietly
		}
		errs = append(errs, err)
	}
	return p.stall.Load() == nil, errors.Join(errs...)
}
