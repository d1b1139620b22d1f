package pool

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// TestAcquireFromTakesASlotNeverWarm: a sandbox made outside the factory
// (a session's resumed one) waits for a slot of a full pool, holds it
// while leased, and is destroyed on release even unused — never kept
// warm for the next tenant; a failed make frees its slot and does not
// stall the pool.
func TestAcquireFromTakesASlotNeverWarm(t *testing.T) {
	f := &fakes{}
	p, _ := newPool(t, Config{Factory: f.factory, MaxLive: 1})
	resumed := func(context.Context) (sandbox.Sandbox, error) { return f.factory(context.Background()) }
	held := mustAcquire(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := p.AcquireFrom(ctx, resumed); !errors.Is(err, sandbox.Timeout) {
		t.Fatalf("AcquireFrom on a full pool: %v, want a timeout", err)
	}
	held.Run(context.Background(), inv("acme"))
	held.Release()
	l, err := p.AcquireFrom(context.Background(), resumed)
	if err != nil {
		t.Fatal(err)
	}
	if l.Warm() || slotsFree(p, 1) {
		t.Fatalf("a resumed lease: warm %v, slot free %v; want cold, holding the slot", l.Warm(), slotsFree(p, 1))
	}
	id := idOf(l)
	if err := l.Release(); err != nil { // unused, and destroyed all the same
		t.Fatal(err)
	}
	if _, _, destroyed := f.snapshot(); !slices.Contains(destroyed, id) {
		t.Fatalf("released resumed sandbox %d not destroyed (destroyed: %v)", id, destroyed)
	}
	if s := p.Snapshot(); s.Warm != 0 || !slotsFree(p, 1) {
		t.Fatalf("after its release: %+v, slot free %v", s, slotsFree(p, 1))
	}
	boom := errors.New("the saved sandbox is gone")
	if _, err := p.AcquireFrom(context.Background(), func(context.Context) (sandbox.Sandbox, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("a failed make: %v", err)
	}
	if !slotsFree(p, 1) {
		t.Fatal("a failed make kept its slot")
	}
	mustAcquire(t, p).Release() // the pool is not stalled
}
