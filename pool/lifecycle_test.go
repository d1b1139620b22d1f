package pool

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/wovyr/wovyr/autoscale"
	"github.com/wovyr/wovyr/sandbox"
)

func TestNewRejectsBadConfig(t *testing.T) {
	f := &fakes{}
	for name, cfg := range map[string]Config{
		"no backend":       {Factory: f.factory, MaxLive: 1},
		"no factory":       {Key: Key{Backend: "x"}, MaxLive: 1},
		"no bound":         {Key: Key{Backend: "x"}, Factory: f.factory},
		"warm above bound": {Key: Key{Backend: "x"}, Factory: f.factory, MaxLive: 2, Autoscale: autoscale.Config{Max: 3}},
		"bad autoscale":    {Key: Key{Backend: "x"}, Factory: f.factory, MaxLive: 2, Autoscale: autoscale.Config{Min: -1}},
		"negative timeout": {Key: Key{Backend: "x"}, Factory: f.factory, MaxLive: 1, DestroyTimeout: -1},
	} {
		if _, err := New(cfg); !errors.Is(err, sandbox.BadInput) {
			t.Errorf("%s: got %v, want bad-input", name, err)
		}
	}
}

func TestReleaseResetOrDestroy(t *testing.T) {
	for _, tc := range []struct {
		name     string
		reset    func(*fakeSandbox) error
		run      bool
		reused   bool
		counters [3]uint64 // resets, reset failures, destroys
	}{
		{"unused goes back warm", nil, false, true, [3]uint64{0, 0, 0}},
		{"used without Resetter is destroyed", nil, true, false, [3]uint64{0, 0, 1}},
		{"verified reset reuses", func(*fakeSandbox) error { return nil }, true, true, [3]uint64{1, 0, 0}},
		{"failed reset destroys", func(*fakeSandbox) error { return errors.New("residue") }, true, false, [3]uint64{0, 1, 1}},
		{"unused is not reset", func(*fakeSandbox) error { panic("reset of an unused sandbox") }, false, true, [3]uint64{0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakes{reset: tc.reset}
			p, _ := newPool(t, Config{Factory: f.factory, MaxLive: 1})
			l, err := p.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			first := idOf(l)
			if tc.run {
				if _, err := l.Run(context.Background(), inv("acme")); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Release(); err != nil {
				t.Fatal(err)
			}
			s := p.Snapshot()
			if got := [3]uint64{s.Resets, s.ResetFailures, s.Destroys}; got != tc.counters {
				t.Fatalf("resets, failures, destroys = %v, want %v", got, tc.counters)
			}
			l, err = p.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release()
			if reused := idOf(l) == first; reused != tc.reused || l.Warm() != tc.reused {
				t.Fatalf("second lease got sandbox %d (first %d, warm %v), want reuse %v", idOf(l), first, l.Warm(), tc.reused)
			}
		})
	}
}

// TestHeldLeaseIsDestroyed: a sandbox held for a session is used, so its
// Release destroys it; it can neither Run nor be held again.
func TestHeldLeaseIsDestroyed(t *testing.T) {
	f := &fakes{}
	p, _ := newPool(t, Config{Factory: f.factory, MaxLive: 1})
	l, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	first := idOf(l)
	if _, err := l.Hold(); err != nil {
		t.Fatal(err)
	}
	const again = "bad-input (lease): a lease runs one invocation or holds one session"
	if _, err := l.Hold(); err == nil || err.Error() != again {
		t.Fatalf("second Hold: %v", err)
	}
	if _, err := l.Run(context.Background(), inv("acme")); err == nil || err.Error() != again {
		t.Fatalf("Run after Hold: %v", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if s := p.Snapshot(); s.Destroys != 1 {
		t.Fatalf("destroys = %d, want 1", s.Destroys)
	}
	l, err = p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if idOf(l) == first {
		t.Fatal("a held sandbox went back warm")
	}
}

func TestReconcileFillsAndTrims(t *testing.T) {
	f := &fakes{}
	p, _ := newPool(t, Config{Factory: f.factory, MaxLive: 6, Autoscale: autoscale.Config{
		Min: 1, Max: 4, Lead: time.Millisecond, IdleTTL: 10 * time.Second, RefillRate: 100}})
	ctx := context.Background()
	p.Reconcile(ctx, sec(0))
	if s := p.Snapshot(); s.Warm != 1 || s.Target != 1 {
		t.Fatalf("start: %+v", s)
	}
	// Three concurrent leases: one hit, two cold misses.
	var ls []*Lease
	for range 3 {
		l, err := p.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	if s := p.Snapshot(); s.Hits != 1 || s.Misses != 2 || s.InUse != 3 || s.Live != 3 {
		t.Fatalf("after 3 acquires: %+v", s)
	}
	p.Reconcile(ctx, sec(1)) // misses: target 1+2 = 3
	if s := p.Snapshot(); s.Target != 3 || s.Warm != 3 || s.Live != 6 {
		t.Fatalf("after the misses: %+v", s)
	}
	for _, l := range ls {
		l.Release() // unused: back warm, 6 warm now
	}
	p.Reconcile(ctx, sec(2)) // above target: trim to 3
	if s := p.Snapshot(); s.Warm != 3 || s.Live != 3 || s.Destroys != 3 {
		t.Fatalf("after trim: %+v", s)
	}
	p.Reconcile(ctx, sec(11.5)) // idle TTL passed: back to Min
	if s := p.Snapshot(); s.Target != 1 || s.Warm != 1 || s.Live != 1 {
		t.Fatalf("after idle: %+v", s)
	}
	if live, _, _ := f.snapshot(); live != 1 {
		t.Fatalf("%d fakes live, want 1", live)
	}
}

func TestCloseFailsWaitersAndLaterAcquires(t *testing.T) {
	f := &fakes{}
	p, _ := newPool(t, Config{Factory: f.factory, MaxLive: 1})
	held := mustAcquire(t, p)
	waiter := acquireBehind(context.Background(), p)
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := <-waiter; !errors.Is(got.err, ErrClosed) || !errors.Is(got.err, sandbox.BackendFailure) {
		t.Fatalf("waiter: got %v, want ErrClosed", got.err)
	}
	if _, err := p.Acquire(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: got %v", err)
	}
	if err := p.Reconcile(context.Background(), sec(0)); !errors.Is(err, ErrClosed) {
		t.Fatalf("reconcile after close: got %v", err)
	}
	held.Release() // unused, but the pool is closed: destroyed
	if live, _, _ := f.snapshot(); live != 0 || p.Snapshot().Live != 0 {
		t.Fatalf("%d fakes live after close and release", live)
	}
}

// TestCancelledColdCreate: a caller that gives up during a cold create gets
// a Killed error and loses no slot; if the factory finishes anyway, the new
// sandbox is kept warm for the next caller rather than leaked or wasted.
func TestCancelledColdCreate(t *testing.T) {
	for _, deaf := range []bool{false, true} {
		t.Run(map[bool]string{false: "factory honours ctx", true: "factory ignores ctx"}[deaf], func(t *testing.T) {
			f := &fakes{block: make(chan struct{}), deaf: deaf}
			p, _ := newPool(t, Config{Factory: f.factory, MaxLive: 1})
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error)
			go func() {
				_, err := p.Acquire(ctx)
				errc <- err
			}()
			for f.calls.Load() == 0 {
				runtime.Gosched()
			}
			cancel()
			if deaf {
				close(f.block)
			}
			if err := <-errc; !errors.Is(err, sandbox.Killed) || !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want killed", err)
			}
			if n := p.streak.Load(); n != 0 {
				t.Fatalf("a cancelled create counted toward the breaker: streak %d", n)
			}
			s := p.Snapshot()
			if !deaf {
				if s.Live != 0 || !slotsFree(p, 1) {
					t.Fatalf("slot kept after a cancelled create: %+v", s)
				}
				close(f.block)
			} else if s.Live != 1 || s.Warm != 1 {
				t.Fatalf("late sandbox not kept warm: %+v", s)
			}
			l, err := p.Acquire(context.Background())
			if err != nil || l.Warm() != deaf {
				t.Fatalf("got %v (warm %v), want warm %v", err, l != nil && l.Warm(), deaf)
			}
			l.Release()
			if f.calls.Load() != map[bool]int64{false: 2, true: 1}[deaf] {
				t.Fatalf("factory called %d times", f.calls.Load())
			}
		})
	}
}

func TestHistogramQuantile(t *testing.T) {
	var h Histogram
	for _, d := range []time.Duration{500 * time.Nanosecond, 3 * time.Microsecond, 3 * time.Microsecond, 40 * time.Microsecond, time.Hour} {
		h.Observe(d)
	}
	s := h.Snapshot()
	if s.Count != 5 || s.Sum != time.Hour+46500*time.Nanosecond {
		t.Fatalf("count %d sum %s", s.Count, s.Sum)
	}
	for q, want := range map[float64]time.Duration{0: time.Microsecond, 0.5: 4 * time.Microsecond, 0.75: 64 * time.Microsecond, 1: s.Bounds[len(s.Bounds)-1]} {
		if got := s.Quantile(q); got != want {
			t.Errorf("q%.2f = %s, want %s", q, got, want)
		}
	}
}
