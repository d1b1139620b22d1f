package pool

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wovyr/wovyr/autoscale"
	"github.com/wovyr/wovyr/sandbox"
)

func TestSizeForPicksMostSpecific(t *testing.T) {
	rules := []Sizing{
		{MaxLive: 1},
		{Template: "python", MaxLive: 2},
		{Backend: "native", MaxLive: 3},
		{Backend: "native", Template: "python", MaxLive: 4},
	}
	for _, tc := range []struct {
		key  Key
		want int
	}{
		{Key{Backend: "native", Template: "python"}, 4},
		{Key{Backend: "native", Template: "node"}, 3},
		{Key{Backend: "wasm", Template: "python"}, 2},
		{Key{Backend: "wasm", Template: "node"}, 1},
	} {
		if got, ok := SizeFor(rules, tc.key); !ok || got.MaxLive != tc.want {
			t.Errorf("%s: got %d (%v), want %d", tc.key, got.MaxLive, ok, tc.want)
		}
	}
	if _, ok := SizeFor(rules[1:2], Key{Backend: "native", Template: "node"}); ok {
		t.Error("a rule for another template matched")
	}
}

func TestGroup(t *testing.T) {
	if _, err := NewGroup(GroupConfig{Sizes: []Sizing{{MaxLive: 1, Autoscale: autoscale.Config{Min: 2, Max: 2}}}}); !errors.Is(err, sandbox.BadInput) {
		t.Fatalf("warm max above max live: got %v, want bad-input", err)
	}
	g, err := NewGroup(GroupConfig{Sizes: []Sizing{
		{Backend: "native", MaxLive: 4, Autoscale: autoscale.Config{Min: 2, Max: 3}},
		{Backend: "wasm", Template: "py", MaxLive: 8, Autoscale: autoscale.Config{Min: 3, Max: 8}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	fa, fb := &fakes{}, &fakes{}
	ka, kb := Key{Backend: "native", Template: "sh"}, Key{Backend: "wasm", Template: "py"}
	if _, err := g.Add(kb, fb.factory, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Add(ka, fa.factory, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Add(ka, fa.factory, nil); !errors.Is(err, sandbox.BadInput) {
		t.Fatalf("duplicate key: got %v", err)
	}
	if _, err := g.Add(Key{Backend: "wasm", Template: "js"}, fa.factory, nil); !errors.Is(err, sandbox.BadInput) {
		t.Fatalf("unsized key: got %v", err)
	}
	if err := g.Reconcile(context.Background(), t0); err != nil {
		t.Fatal(err)
	}
	snaps := g.Snapshots()
	if len(snaps) != 2 || snaps[0].Key != ka || snaps[0].Warm != 2 || snaps[1].Key != kb || snaps[1].Warm != 3 {
		t.Fatalf("snapshots: %+v", snaps)
	}
	p, ok := g.Get(ka)
	if !ok {
		t.Fatal("pool not found")
	}
	if l, err := p.Acquire(context.Background()); err != nil || !l.Warm() {
		t.Fatalf("acquire from group pool: %v", err)
	} else {
		l.Release()
	}
	if err := g.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	la, _, _ := fa.snapshot()
	lb, _, _ := fb.snapshot()
	if la != 0 || lb != 0 {
		t.Fatalf("after Close: %d and %d fakes live", la, lb)
	}
	if _, err := p.Acquire(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("acquire after close: got %v", err)
	}
}

func TestKeyFor(t *testing.T) {
	k := KeyFor("native", sandbox.Template{Kind: sandbox.KindCommand, Limits: sandbox.Limits{Memory: 64 << 20}})
	want := Key{Backend: "native", Template: "command:", Shape: "mem=67108864,pids=128,disk=67108864,nofile=256"}
	if k != want {
		t.Fatalf("got %+v, want %+v", k, want)
	}
	if s := (Key{Backend: "wasm", Template: "t", Shape: "s", Region: "eu"}).String(); s != "wasm/t/s@eu" {
		t.Fatalf("String: %q", s)
	}
}

// TestReconcileAsyncSlowPoolHoldsNoOneBack: a pool whose create blocks (a
// VM booting) neither delays another pool's refill nor is reconciled twice
// at once, and Close waits for the blocked create and destroys its sandbox.
func TestReconcileAsyncSlowPoolHoldsNoOneBack(t *testing.T) {
	g, err := NewGroup(GroupConfig{Sizes: []Sizing{{MaxLive: 4, Autoscale: autoscale.Config{Min: 1, Max: 2}}}})
	if err != nil {
		t.Fatal(err)
	}
	slow := &fakes{block: make(chan struct{}), deaf: true}
	fast := &fakes{}
	if _, err := g.Add(Key{Backend: "microvm"}, slow.factory, nil); err != nil {
		t.Fatal(err)
	}
	fp, err := g.Add(Key{Backend: "native"}, fast.factory, nil)
	if err != nil {
		t.Fatal(err)
	}
	var failed atomic.Int64
	onErr := func(k Key, err error) { failed.Add(1); t.Logf("%s: %v", k, err) }
	g.ReconcileAsync(context.Background(), t0, onErr)
	deadline := time.Now().Add(5 * time.Second)
	for fp.Snapshot().Warm < 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if w := fp.Snapshot().Warm; w != 1 {
		t.Fatalf("fast pool has %d warm while the slow one is creating; want 1", w)
	}
	for range 5 {
		g.ReconcileAsync(context.Background(), t0.Add(time.Second), onErr)
	}
	if c := slow.calls.Load(); c != 1 {
		t.Fatalf("slow pool's factory called %d times; want 1 (its reconcile is still running)", c)
	}
	closed := make(chan error, 1)
	go func() { closed <- g.Close(context.Background()) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a create was in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(slow.block)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if live, _, _ := slow.snapshot(); live != 0 {
		t.Fatalf("%d slow sandboxes live after Close", live)
	}
	if failed.Load() != 0 {
		t.Fatalf("%d reconcile errors", failed.Load())
	}
}

// TestReconcileAsyncReplacesDuringASlowRefill: a sandbox claimed while a
// refill's create is still under way is replaced at the next decision, not
// after that create ends (a steady arrival rate would otherwise find the
// pool empty once per refill), and a create under way is never started
// twice.
func TestReconcileAsyncReplacesDuringASlowRefill(t *testing.T) {
	g, err := NewGroup(GroupConfig{Sizes: []Sizing{{MaxLive: 4, Autoscale: autoscale.Config{Min: 2, Max: 2}}}})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakes{}
	p, err := g.Add(Key{Backend: "gvisor"}, f.factory, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := p.Reconcile(ctx, t0); err != nil || p.Snapshot().Warm != 2 {
		t.Fatalf("first fill: %v, %d warm; want 2", err, p.Snapshot().Warm)
	}
	f.block = make(chan struct{}) // every create from here on waits
	onErr := func(k Key, err error) { t.Errorf("%s: %v", k, err) }
	// decide reconciles at now and waits until its decision is made (the
	// pool's busy flag is clear again), its creates left under way.
	decide := func(now time.Time) {
		t.Helper()
		g.ReconcileAsync(ctx, now, onErr)
		deadline := time.Now().Add(5 * time.Second)
		for p.busy.Load() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if p.busy.Load() {
			t.Fatal("the decision did not end while its create was blocked")
		}
	}
	var leases []*Lease
	claim := func() {
		t.Helper()
		l, err := p.Acquire(ctx)
		if err != nil || !l.Warm() {
			t.Fatalf("acquire: %v (warm %v); want a warm lease", err, err == nil && l.Warm())
		}
		leases = append(leases, l)
	}
	claim()
	decide(t0.Add(100 * time.Millisecond))
	claim()
	decide(t0.Add(200 * time.Millisecond))
	if c := f.calls.Load(); c != 4 {
		t.Fatalf("factory called %d times; want 4 (two fills, then one create per claim while the first is blocked)", c)
	}
	decide(t0.Add(300 * time.Millisecond))
	decide(t0.Add(400 * time.Millisecond))
	if c := f.calls.Load(); c != 4 {
		t.Fatalf("factory called %d times with two creates under way for a target of 2; want 4", c)
	}
	close(f.block)
	deadline := time.Now().Add(5 * time.Second)
	for p.Snapshot().Warm < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if w := p.Snapshot().Warm; w != 2 {
		t.Fatalf("%d warm after the creates ended; want 2", w)
	}
	for _, l := range leases {
		if err := l.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if live, _, _ := f.snapshot(); live != 0 {
		t.Fatalf("%d sandboxes live after Close", live)
	}
}
