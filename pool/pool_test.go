package pool

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wovyr/wovyr/autoscale"
	"github.com/wovyr/wovyr/sandbox"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func sec(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func TestAcquireCancelledWhileWaitingReturnsSlot(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ctx   func() (context.Context, context.CancelFunc)
		class sandbox.Class
		cause error
	}{
		{"cancel", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, sandbox.Killed, context.Canceled},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}, sandbox.Timeout, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakes{}
			p, _ := newPool(t, Config{Factory: f.factory, MaxLive: 1})
			held := mustAcquire(t, p)
			ctx, cancel := tc.ctx()
			defer cancel()
			waiter := acquireBehind(ctx, p)
			if tc.class == sandbox.Killed {
				cancel()
			}
			got := <-waiter
			if got.l != nil {
				t.Fatal("a cancelled acquire returned a lease")
			}
			err := got.err
			if !errors.Is(err, tc.class) || !errors.Is(err, tc.cause) {
				t.Fatalf("got %v, want %s wrapping %v", err, tc.class, tc.cause)
			}
			if s := p.Snapshot(); s.Live != 1 || s.InUse != 1 || s.AcquireErrors != 1 {
				t.Fatalf("after the cancelled wait: %+v", s)
			}
			held.Run(context.Background(), inv("acme")) // used: destroyed on release
			if err := held.Release(); err != nil {
				t.Fatal(err)
			}
			if !slotsFree(p, 1) {
				t.Fatal("the cancelled acquire kept a slot")
			}
			// The freed slot is usable at once.
			mustAcquire(t, p).Release() // unused: kept warm until Close
			if err := p.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if live, _, _ := f.snapshot(); live != 0 {
				t.Fatalf("%d fake sandboxes still live", live)
			}
		})
	}
}

// TestAcquireWaiterTakesReturnedWarm: a waiter blocked on a full pool takes
// a sandbox that comes back warm instead of waiting for a slot.
func TestAcquireWaiterTakesReturnedWarm(t *testing.T) {
	f := &fakes{}
	p, _ := newPool(t, Config{Factory: f.factory, MaxLive: 1})
	held := mustAcquire(t, p)
	waiter := acquireBehind(context.Background(), p)
	want := idOf(held)
	held.Release() // unused: goes back warm, the waiter takes it
	got := <-waiter
	if got.err != nil {
		t.Fatal(got.err)
	}
	l := got.l
	if idOf(l) != want || !l.Warm() {
		t.Fatalf("waiter got sandbox %d (warm %v), want the returned %d", idOf(l), l.Warm(), want)
	}
	l.Release()
	if f.calls.Load() != 1 {
		t.Fatalf("factory called %d times, want 1", f.calls.Load())
	}
}

// TestConcurrentAcquiresNeverExceedBound hammers one pool from many
// goroutines released at once, with Reconcile refilling, resets, and
// cancellations and deadlines mixed in; live sandboxes never pass MaxLive
// and every slot is free at the end.
func TestConcurrentAcquiresNeverExceedBound(t *testing.T) {
	for _, resettable := range []bool{false, true} {
		t.Run(map[bool]string{false: "destroy", true: "reset"}[resettable], func(t *testing.T) {
			const maxLive = 4
			f := &fakes{}
			if resettable {
				n := 0
				var mu sync.Mutex
				f.reset = func(*fakeSandbox) error { // every third reset fails
					mu.Lock()
					defer mu.Unlock()
					n++
					if n%3 == 0 {
						return errors.New("residue found")
					}
					return nil
				}
			}
			p, _ := newPool(t, Config{Factory: f.factory, MaxLive: maxLive,
				Autoscale: autoscale.Config{Min: 2, Max: 3, RefillRate: 1000}})
			start := make(chan struct{})
			var wg sync.WaitGroup
			for g := range 32 {
				wg.Go(func() {
					<-start
					for i := range 40 {
						ctx, cancel := context.WithCancel(context.Background())
						switch (g + i) % 7 {
						case 0: // cancelled before it starts
							cancel()
						case 1: // likely to expire while it waits
							ctx, cancel = context.WithTimeout(context.Background(), 50*time.Microsecond)
						}
						l, err := p.Acquire(ctx)
						cancel()
						if err != nil {
							if !errors.Is(err, sandbox.Killed) && !errors.Is(err, sandbox.Timeout) {
								t.Error(err)
							}
							continue
						}
						if i%2 == 0 {
							if _, err := l.Run(context.Background(), inv("acme")); err != nil {
								t.Error(err)
							}
						}
						l.Release()
					}
				})
			}
			wg.Go(func() {
				<-start
				for i := range 200 {
					p.Reconcile(context.Background(), sec(float64(i)/10))
					runtime.Gosched()
				}
			})
			close(start)
			wg.Wait()
			if err := p.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Logf("acquire errors %d, hits %d, misses %d", p.Snapshot().AcquireErrors, p.Snapshot().Hits, p.Snapshot().Misses)
			live, most, _ := f.snapshot()
			if most > maxLive || most == 0 {
				t.Fatalf("at most %d sandboxes were live at once, bound %d", most, maxLive)
			}
			if s := p.Snapshot(); live != 0 || s.Live != 0 || s.InUse != 0 || !slotsFree(p, maxLive) {
				t.Fatalf("after close: %d fakes live, snapshot %+v", live, s)
			}
		})
	}
}

func TestDoubleReleaseIsHarmless(t *testing.T) {
	f := &fakes{}
	p, _ := newPool(t, Config{Factory: f.factory, MaxLive: 2})
	l, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Run(context.Background(), inv("acme")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Run(context.Background(), inv("acme")); !errors.Is(err, sandbox.BadInput) {
		t.Fatalf("second run: got %v, want bad-input", err)
	}
	for range 3 {
		if err := l.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Run(context.Background(), inv("acme")); !errors.Is(err, sandbox.BadInput) {
		t.Fatalf("run after release: got %v, want bad-input", err)
	}
	_, _, destroyed := f.snapshot()
	if s := p.Snapshot(); len(destroyed) != 1 || s.Destroys != 1 || s.Live != 0 || s.InUse != 0 || s.Warm != 0 {
		t.Fatalf("destroyed %v, snapshot %+v", destroyed, s)
	}
	if !slotsFree(p, 2) {
		t.Fatal("a double release changed the slot count")
	}
}

func TestLeakedLeaseIsReclaimed(t *testing.T) {
	f := &fakes{}
	p, logs := newPool(t, Config{Factory: f.factory, MaxLive: 1})
	func() {
		l, err := p.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		l.Run(context.Background(), inv("acme")) // and forget to Release
	}()
	deadline := time.Now().Add(10 * time.Second)
	for p.Snapshot().Live != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("leaked lease not reclaimed: %+v", p.Snapshot())
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	_, _, destroyed := f.snapshot()
	if s := p.Snapshot(); s.Leaked != 1 || s.InUse != 0 || len(destroyed) != 1 {
		t.Fatalf("leaked %d, in use %d, destroyed %v", s.Leaked, s.InUse, destroyed)
	}
	if !strings.Contains(logs.String(), "lease garbage-collected without Release") {
		t.Fatalf("leak not reported; log:\n%s", logs)
	}
	// The slot came back.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	runtime.KeepAlive(l)
}

// TestReleasedLeaseIsNotReported: the safety net stays quiet for leases
// that were released.
func TestReleasedLeaseIsNotReported(t *testing.T) {
	f := &fakes{}
	p, logs := newPool(t, Config{Factory: f.factory, MaxLive: 1})
	for range 20 {
		l, err := p.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
	}
	for range 5 {
		runtime.GC()
	}
	time.Sleep(10 * time.Millisecond)
	if s := p.Snapshot(); s.Leaked != 0 || strings.Contains(logs.String(), "garbage-collected") {
		t.Fatalf("released leases reported as leaked: %d", s.Leaked)
	}
}

func TestBreakerOpensAndRecovers(t *testing.T) {
	f := &fakes{}
	f.fail.Store(true)
	p, logs := newPool(t, Config{Factory: f.factory, MaxLive: 4, Autoscale: autoscale.Config{
		Min: 2, Max: 2, RefillRate: 100,
		Breaker: autoscale.BreakerConfig{Threshold: 3, Backoff: time.Second, MaxBackoff: 4 * time.Second},
	}})
	ctx := context.Background()
	type want struct {
		at      float64
		calls   int64 // factory calls so far
		breaker autoscale.BreakerState
		warm    int
	}
	check := func(w want) {
		t.Helper()
		err := p.Reconcile(ctx, sec(w.at))
		s := p.Snapshot()
		if f.calls.Load() != w.calls || s.Breaker != w.breaker || s.Warm != w.warm {
			t.Fatalf("t=%gs: calls %d breaker %s warm %d (err %v), want %+v", w.at, f.calls.Load(), s.Breaker, s.Warm, err, w)
		}
		if s.Live != s.Warm {
			t.Fatalf("t=%gs: %d live but %d warm: failed creates kept slots", w.at, s.Live, s.Warm)
		}
	}
	check(want{0, 2, autoscale.Closed, 0})     // two refills fail (streak 2)
	check(want{1, 4, autoscale.Closed, 0})     // two more (streak 4)
	check(want{1.5, 4, autoscale.Open, 0})     // open: nothing tried
	check(want{2, 4, autoscale.Open, 0})       // still waiting 1s
	check(want{2.5, 5, autoscale.HalfOpen, 0}) // one probe, fails
	check(want{3, 5, autoscale.Open, 0})       // back-off doubles to 2s
	check(want{4.9, 5, autoscale.Open, 0})
	f.fail.Store(false)                      // the backend recovers
	check(want{5, 6, autoscale.HalfOpen, 1}) // the probe succeeds
	check(want{5.5, 7, autoscale.Closed, 2}) // closed: refill to target
	if s := p.Snapshot(); s.CreateFailures != 5 || s.Creates != 2 {
		t.Fatalf("create failures %d, creates %d", s.CreateFailures, s.Creates)
	}
	for _, msg := range []string{"breaker open", "breaker half-open", "breaker closed"} {
		if !strings.Contains(logs.String(), msg) {
			t.Errorf("log lacks %q", msg)
		}
	}
}

func TestBreakerClosedByColdSuccess(t *testing.T) {
	f := &fakes{}
	f.fail.Store(true)
	p, _ := newPool(t, Config{Factory: f.factory, MaxLive: 2, Autoscale: autoscale.Config{
		Min: 1, Max: 1, Breaker: autoscale.BreakerConfig{Threshold: 1, Backoff: time.Hour, MaxBackoff: time.Hour}}})
	p.Reconcile(context.Background(), sec(0))
	p.Reconcile(context.Background(), sec(1))
	if s := p.Snapshot(); s.Breaker != autoscale.Open {
		t.Fatalf("breaker %s, want open", s.Breaker)
	}
	// A cold acquire while open still tries the backend and fails typed.
	if _, err := p.Acquire(context.Background()); !errors.Is(err, sandbox.BackendFailure) {
		t.Fatalf("got %v, want backend-failure", err)
	}
	f.fail.Store(false)
	l, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	p.Reconcile(context.Background(), sec(2))
	if s := p.Snapshot(); s.Breaker != autoscale.Closed || s.Warm != 1 {
		t.Fatalf("after a cold success: breaker %s, warm %d", s.Breaker, s.Warm)
	}
}
