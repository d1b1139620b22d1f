package pool

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// fakeRestorer clones fakes' sandboxes from a fake golden.
type fakeRestorer struct {
	f        *fakes
	captures atomic.Int64
	restores atomic.Int64
	gate     chan struct{} // if set, Golden waits on it (or ctx)
	noSnap   bool          // Golden says ErrNoSnapshot
	failNext atomic.Bool   // the next Restore fails and voids the golden
	last     atomic.Pointer[fakeGolden]
}

type fakeGolden struct {
	id      string
	invalid atomic.Bool
}

func (g *fakeGolden) ID() string  { return g.id }
func (g *fakeGolden) Valid() bool { return !g.invalid.Load() }

func (r *fakeRestorer) Golden(ctx context.Context) (sandbox.Golden, error) {
	n := r.captures.Add(1)
	if r.noSnap {
		return nil, sandbox.ErrNoSnapshot
	}
	if r.gate != nil {
		select {
		case <-r.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	g := &fakeGolden{id: "g" + string(rune('0'+n))}
	r.last.Store(g)
	return g, nil
}

func (r *fakeRestorer) Restore(ctx context.Context, g sandbox.Golden) (sandbox.Sandbox, error) {
	r.restores.Add(1)
	if r.failNext.CompareAndSwap(true, false) {
		g.(*fakeGolden).invalid.Store(true)
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "golden damaged")
	}
	return r.f.factory(ctx)
}

// waitGolden waits until the pool holds a golden (the capture is
// asynchronous by design: no acquire waits for it).
func waitGolden(t *testing.T, p *Pool) {
	t.Helper()
	for range 1000 {
		p.gold.mu.Lock()
		ok := p.gold.g != nil && !p.gold.building
		p.gold.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no golden snapshot")
}

// TestPoolFillsWithClones: the first create is cold while the golden is
// captured in the background; then creates are restores; a failed restore
// falls back to the factory (the same backend), is counted, and a golden it
// voided is captured again.
func TestPoolFillsWithClones(t *testing.T) {
	f := &fakes{}
	r := &fakeRestorer{f: f, gate: make(chan struct{})}
	p, logs := newPool(t, Config{Factory: f.factory, Restorer: r, MaxLive: 4})

	l := mustAcquire(t, p) // no golden yet: cold, and the capture does not hold it back
	if f.calls.Load() != 1 || r.restores.Load() != 0 {
		t.Fatalf("first acquire: factory %d restores %d, want a cold prepare", f.calls.Load(), r.restores.Load())
	}
	l.Release()
	close(r.gate)
	waitGolden(t, p)

	for range 2 {
		l := mustAcquire(t, p)
		l.Run(context.Background(), inv("acme")) // spent: destroyed on release
		l.Release()
	}
	if got := r.restores.Load(); got < 1 || f.calls.Load() != 1+got {
		t.Fatalf("after the golden: restores %d, factory calls %d", got, f.calls.Load())
	}
	coldBefore := f.calls.Load() - r.restores.Load()

	r.failNext.Store(true)
	l = mustAcquire(t, p)
	l.Run(context.Background(), inv("acme"))
	l.Release()
	for p.Snapshot().Warm > 0 { // drain what is warm so the next acquire creates
		l := mustAcquire(t, p)
		l.Run(context.Background(), inv("acme"))
		l.Release()
	}
	l = mustAcquire(t, p)
	l.Release()
	sn := p.Snapshot()
	if sn.RestoreFallbacks != 1 {
		t.Fatalf("fallbacks %d, want 1", sn.RestoreFallbacks)
	}
	// Restores that succeeded called the factory too (fakeRestorer).
	if cold := f.calls.Load() - (r.restores.Load() - int64(sn.RestoreFallbacks)); cold < coldBefore+1 {
		t.Fatalf("the failed restore did not fall back to the factory: cold %d before %d", cold, coldBefore)
	}
	if !strings.Contains(logs.String(), "restore failed; preparing cold on the same backend") {
		t.Fatalf("no fallback log: %s", logs)
	}
	waitGolden(t, p)
	if r.captures.Load() != 2 {
		t.Fatalf("captures %d, want 2 (the voided golden captured again)", r.captures.Load())
	}
}

// TestPoolWithoutSnapshotsNeverRetries: ErrNoSnapshot is asked once.
func TestPoolWithoutSnapshotsNeverRetries(t *testing.T) {
	f := &fakes{}
	r := &fakeRestorer{f: f, noSnap: true}
	p, _ := newPool(t, Config{Factory: f.factory, Restorer: r, MaxLive: 2})
	for range 3 {
		l := mustAcquire(t, p)
		l.Run(context.Background(), inv("acme"))
		l.Release()
		p.gold.wait()
	}
	if r.captures.Load() != 1 || r.restores.Load() != 0 || f.calls.Load() != 3 {
		t.Fatalf("captures %d restores %d cold %d, want 1 0 3", r.captures.Load(), r.restores.Load(), f.calls.Load())
	}
}

// TestCloseCancelsCapture: Close ends a capture in progress and waits for it.
func TestCloseCancelsCapture(t *testing.T) {
	f := &fakes{}
	r := &fakeRestorer{f: f, gate: make(chan struct{})}
	p, _ := newPool(t, Config{Factory: f.factory, Restorer: r, MaxLive: 2})
	mustAcquire(t, p).Release()
	done := make(chan error, 1)
	go func() { done <- p.Close(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the capture")
	}
	if p.gold.g != nil || p.Snapshot().GoldenFailures != 1 {
		t.Fatalf("golden %v failures %d after Close", p.gold.g, p.Snapshot().GoldenFailures)
	}
}
