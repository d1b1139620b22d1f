package pool

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/autoscale"
	"github.com/wovyr/wovyr/sandbox"
)

// TestPoolForMissingTemplateStopsRetrying: issue #25 item 3 — the daemon
// kept re-preparing a pool whose template can never be prepared (16
// failures in its log). A permanent (bad-input) failure stalls the pool:
// no refill, an Acquire that fails at once with the typed reason, one
// retry per StallRetry, and a refill as soon as the template's check
// passes.
func TestPoolForMissingTemplateStopsRetrying(t *testing.T) {
	f := &fakes{}
	f.missing.Store(true)
	p, logs := newPool(t, Config{Factory: f.factory, Check: f.check, MaxLive: 4, StallRetry: time.Minute,
		Autoscale: autoscale.Config{Min: 2, Max: 2, RefillRate: 100}})
	ctx := context.Background()
	calls := func(at float64, want int64, state string) {
		t.Helper()
		if got, s := f.calls.Load(), p.Snapshot(); got != want || s.State() != state {
			t.Fatalf("t=%gs: %d prepares, state %s; want %d, %s", at, got, s.State(), want, state)
		}
	}
	if err := p.Reconcile(ctx, sec(0)); !errors.Is(err, sandbox.BadInput) {
		t.Fatalf("first reconcile: %v, want the two bad-input failures", err)
	}
	calls(0, 2, StateStalled) // the two parallel refills, then no more
	for i := 1; i <= 600; i++ {
		at := float64(i) / 10
		if err := p.Reconcile(ctx, sec(at)); err != nil {
			t.Fatalf("t=%gs: %v", at, err)
		}
		calls(at, 2, StateStalled)
	}
	s := p.Snapshot()
	if st := s.Stall; st.Class() != sandbox.BadInput || st.Field() != "template.image" || !st.RetryAt.Equal(sec(60.1)) || s.Live != 0 || s.Warm != 0 {
		t.Fatalf("stall %+v class %s field %s, live %d warm %d; want bad-input on template.image, retry at +60.1s, nothing live",
			st, st.Class(), st.Field(), s.Live, s.Warm)
	}

	// Acquire fails at once, typed, and prepares nothing.
	_, err := p.Acquire(ctx)
	if !errors.Is(err, ErrStalled) || sandbox.ClassOf(err) != sandbox.BadInput || sandbox.FieldOf(err) != "template.image" {
		t.Fatalf("acquire: %v, want ErrStalled with the template's bad-input error", err)
	}
	if got, want := sandbox.Public(err), `bad-input (template.image): no template "py" on this node`; got != want {
		t.Fatalf("tenant reads %q, want %q", got, want)
	}
	calls(60, 2, StateStalled)

	// The retry is due: one create, which stalls the pool again.
	p.Reconcile(ctx, sec(60.1))
	calls(60.1, 3, StateStalled)
	p.Reconcile(ctx, sec(60.2))
	calls(60.2, 3, StateStalled)

	// The template is built: the check passes, one create proves it, and
	// the refill goes on as usual.
	f.missing.Store(false)
	if err := p.Reconcile(ctx, sec(61)); err != nil {
		t.Fatal(err)
	}
	calls(61, 5, StateOK)
	if s := p.Snapshot(); s.Warm != 2 || s.Stall != nil || s.CreateFailures != 3 {
		t.Fatalf("after the build: %+v", s)
	}
	if n := strings.Count(logs.String(), "pool stalled"); n != 1 {
		t.Errorf("%d stall warnings, want 1 (a retry that fails again is quiet):\n%s", n, logs)
	}
}

// TestStalledPoolResumes: a stalled pool that no check can clear retries
// once when Resume is called (the operator re-certified), not before.
func TestStalledPoolResumes(t *testing.T) {
	f := &fakes{}
	f.missing.Store(true)
	p, _ := newPool(t, Config{Factory: f.factory, MaxLive: 1, Autoscale: autoscale.Config{Min: 1, Max: 1}})
	ctx := context.Background()
	for i := range 10 {
		p.Reconcile(ctx, sec(float64(i)))
	}
	if n := f.calls.Load(); n != 1 {
		t.Fatalf("%d prepares while stalled, want 1", n)
	}
	f.missing.Store(false)
	p.Reconcile(ctx, sec(10))
	if n := f.calls.Load(); n != 1 {
		t.Fatalf("%d prepares before Resume, want 1 (no check, retry 10m away)", n)
	}
	p.Resume()
	p.Reconcile(ctx, sec(11))
	if s := p.Snapshot(); f.calls.Load() != 2 || s.State() != StateOK || s.Warm != 1 {
		t.Fatalf("after Resume: %d prepares, state %s, warm %d; want 2, ok, 1", f.calls.Load(), s.State(), s.Warm)
	}
}

// TestTransientFailureDoesNotStall: a backend failure is left to the
// breaker, and it ends a stall: it says the template got past its check.
func TestTransientFailureDoesNotStall(t *testing.T) {
	f := &fakes{}
	f.missing.Store(true)
	p, _ := newPool(t, Config{Factory: f.factory, MaxLive: 1, Autoscale: autoscale.Config{Min: 1, Max: 1,
		Breaker: autoscale.BreakerConfig{Threshold: 2, Backoff: time.Hour, MaxBackoff: time.Hour}}})
	ctx := context.Background()
	p.Reconcile(ctx, sec(0))
	if s := p.Snapshot(); s.State() != StateStalled {
		t.Fatalf("state %s, want stalled", s.State())
	}
	f.fail.Store(true)
	p.Resume()
	p.Reconcile(ctx, sec(1)) // the retry fails transiently: streak 2
	if s := p.Snapshot(); s.Stall != nil {
		t.Fatalf("still stalled after a backend failure: %v", s.Stall.Err)
	}
	p.Reconcile(ctx, sec(2))
	if s := p.Snapshot(); s.State() != StateOpen || f.calls.Load() != 2 {
		t.Fatalf("state %s after %d prepares, want breaker-open after 2", s.State(), f.calls.Load())
	}
	if _, err := p.Acquire(ctx); errors.Is(err, ErrStalled) || !errors.Is(err, sandbox.BackendFailure) {
		t.Fatalf("acquire: %v, want the backend failure of a cold create", err)
	}
}
