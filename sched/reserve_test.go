package sched

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/wovyr/wovyr/resource"
)

func statsOf(im impl, name string) TenantStats {
	for _, st := range im.Snapshot() {
		if st.Tenant == name {
			return st
		}
	}
	return TenantStats{}
}

// TestReservationBound: a task too large for what is free misses its turn
// at most K+1 times; then it is reserved, nothing that needs what it lacks
// starts, and it starts at the first Next after the tasks holding those
// resources are Done. Its tenant earns credit all along.
func TestReservationBound(t *testing.T) {
	const K = 3
	cfg := Config{Capacity: cpu(4000), ReserveAfter: K}
	for k, im := range newImpls(t, cfg, []string{"small", "big"}, []int64{1, 1}) {
		for i := range 40 {
			if err := im.Submit(Task{ID: fmt.Sprint("s", i), Tenant: "small", Demand: cpu(1000)}, t0); err != nil {
				t.Fatal(err)
			}
		}
		var running []string
		next := func() (Start, bool) {
			st, ok := im.Next(im.Free(), t0)
			if ok {
				running = append(running, st.Task.ID)
			}
			return st, ok
		}
		done := func() {
			if err := im.Done(running[0]); err != nil {
				t.Fatal(err)
			}
			running = running[1:]
		}
		for range 4 {
			next()
		}
		if err := im.Submit(Task{ID: "B", Tenant: "big", Demand: cpu(4000)}, t0); err != nil {
			t.Fatal(err)
		}
		// Both start at credit 0, so the first pick is small's turn (a tie
		// goes to the tenant added first); from the second on, big's credit
		// leads and every pick small makes is a turn big missed. Reserved
		// after K+1 missed turns, in the (K+2)th pick.
		for i := range K + 2 {
			if statsOf(im, "big").Reserved {
				t.Fatalf("impl %d: reserved after only %d picks", k, i)
			}
			done()
			if st, ok := next(); !ok || st.Task.Tenant != "small" {
				t.Fatalf("impl %d: skip %d: %+v %v", k, i, st, ok)
			}
		}
		if !statsOf(im, "big").Reserved {
			t.Fatalf("impl %d: not reserved after %d missed turns", k, K+1)
		}
		// Reserved: the remaining small tasks drain and none starts.
		for len(running) > 1 {
			done()
			if st, ok := next(); ok {
				t.Fatalf("impl %d: %s started past the reservation", k, st.Task.ID)
			}
		}
		done()
		st, ok := next()
		if !ok || st.Task.ID != "B" || !st.Reserved {
			t.Fatalf("impl %d: the reserved task did not start once free: %+v %v", k, st, ok)
		}
		// K+3 picks in all, each earning both 1 and charging its winner 2:
		// small won K+2 of them (−K−2), big earned throughout and paid for
		// its own start (K+3−2). Picks that start nothing earn nothing.
		if b, sm := statsOf(im, "big"), statsOf(im, "small"); b.Credit != K+1 || sm.Credit != -K-1 {
			t.Fatalf("impl %d: credits after the reserved start: big %d small %d, want %d and %d", k, b.Credit, sm.Credit, K+1, -K-1)
		}
		done()
		if st, ok := next(); !ok || st.Task.Tenant != "small" {
			t.Fatalf("impl %d: small tasks did not resume: %+v", k, st)
		}
	}
}

// TestReservationBackfill: a reservation holds back only what the reserved
// task needs; work that needs none of the missing resources (here: no GPU)
// keeps starting beside it, as long as it leaves the reserved CPU alone.
func TestReservationBackfill(t *testing.T) {
	cfg := Config{Capacity: resource.Vector{CPUMillis: 4000, GPU: 1}, ReserveAfter: 1}
	gpuTask := resource.Vector{CPUMillis: 1000, GPU: 1}
	for k, im := range newImpls(t, cfg, []string{"g", "c"}, []int64{1, 1}) {
		for _, task := range []Task{{"g0", "g", gpuTask}, {"g1", "g", gpuTask}, {"c0", "c", cpu(500)},
			{"c1", "c", cpu(500)}, {"c2", "c", cpu(500)}, {"c3", "c", cpu(500)}, {"c4", "c", cpu(500)}} {
			if err := im.Submit(task, t0); err != nil {
				t.Fatal(err)
			}
		}
		var got []string
		for {
			st, ok := im.Next(im.Free(), t0)
			if !ok {
				break
			}
			got = append(got, fmt.Sprintf("%s:%v", st.Task.ID, st.Reserved))
		}
		// g0 takes the GPU; g1 is skipped twice (c0, c1) and reserved;
		// c2, c3 still fit beside the 1000m set aside for g1; c4 does not.
		if want := "[g0:false c0:false c1:false c2:false c3:false]"; fmt.Sprint(got) != want {
			t.Fatalf("impl %d: starts %v, want %s", k, got, want)
		}
		if !statsOf(im, "g").Reserved {
			t.Fatalf("impl %d: g1 not reserved", k)
		}
		if err := im.Done("g0"); err != nil {
			t.Fatal(err)
		}
		if st, ok := im.Next(im.Free(), t0); !ok || st.Task.ID != "g1" || !st.Reserved {
			t.Fatalf("impl %d: g1 did not start from its reservation: %+v", k, st)
		}
	}
}

// TestCancelReservedHead: cancelling the reserved head frees the resources
// it held back at once.
func TestCancelReservedHead(t *testing.T) {
	cfg := Config{Capacity: cpu(2000), ReserveAfter: 1}
	for k, im := range newImpls(t, cfg, []string{"a", "b"}, []int64{1, 1}) {
		if err := im.Submit(Task{"b0", "b", cpu(1000)}, t0); err != nil {
			t.Fatal(err)
		}
		if st, ok := im.Next(im.Free(), t0); !ok || st.Task.ID != "b0" {
			t.Fatalf("impl %d: b0 did not start", k)
		}
		for _, task := range []Task{{"a0", "a", cpu(2000)}, {"b1", "b", cpu(500)},
			{"b2", "b", cpu(100)}, {"b3", "b", cpu(100)}, {"a1", "a", cpu(100)}} {
			if err := im.Submit(task, t0); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 { // b1, b2 start; a0 is skipped twice and reserved
			if _, ok := im.Next(im.Free(), t0); !ok {
				t.Fatalf("impl %d: nothing started", k)
			}
		}
		if !statsOf(im, "a").Reserved {
			t.Fatalf("impl %d: a0 not reserved", k)
		}
		if st, ok := im.Next(im.Free(), t0); ok {
			t.Fatalf("impl %d: %+v started past the reservation", k, st)
		}
		if err := im.Cancel("a0"); err != nil {
			t.Fatal(err)
		}
		if statsOf(im, "a").Reserved {
			t.Fatalf("impl %d: reservation kept after its task was cancelled", k)
		}
		st, ok := im.Next(im.Free(), t0)
		if !ok || st.Task.ID != "a1" || st.Reserved {
			t.Fatalf("impl %d: after cancel got %+v %v, want a1 by round-robin", k, st, ok)
		}
	}
}

// TestNoStarvation: under random mixed demands every task starts, none is
// passed over more than K+1 times, and the node drains to zero.
func TestNoStarvation(t *testing.T) {
	const K = 2
	for seed := range uint64(scale(40)) {
		r := rand.New(rand.NewPCG(seed, 3))
		s := mustNew(t, Config{Capacity: traceCapacity, ReserveAfter: K})
		names := []string{"a", "b", "c", "d", "e"}
		for i, n := range names {
			if err := s.AddTenant(n, TenantConfig{Weight: int64(1 + i), MaxQueued: 1000, MaxRunning: 1 + i%3}); err != nil {
				t.Fatal(err)
			}
		}
		d := newDriver(t, seed)
		var running []string
		started, submitted := 0, 0
		for step := range 6000 {
			if step < 4000 && r.IntN(2) == 0 {
				dem := d.demand()
				if dem.Negative() || !dem.Fits(traceCapacity) {
					continue
				}
				mustSubmit(t, s, fmt.Sprint("k", step), names[r.IntN(len(names))], dem)
				submitted++
			}
			if len(running) > 0 && r.IntN(3) == 0 {
				i := r.IntN(len(running))
				if err := s.Done(running[i]); err != nil {
					t.Fatal(err)
				}
				running = append(running[:i], running[i+1:]...)
			}
			for {
				st, ok := s.Next(s.Free(), t0)
				if !ok {
					break
				}
				if sk := s.tasks.get(st.Task.ID).skips; sk > K+1 {
					t.Fatalf("seed %d: %s was passed over %d times, bound is %d", seed, st.Task.ID, sk, K+1)
				}
				running = append(running, st.Task.ID)
				started++
			}
		}
		for len(running) > 0 { // drain
			if err := s.Done(running[0]); err != nil {
				t.Fatal(err)
			}
			running = running[1:]
			for {
				st, ok := s.Next(s.Free(), t0)
				if !ok {
					break
				}
				running = append(running, st.Task.ID)
				started++
			}
		}
		if started != submitted || s.Queued() != 0 || !s.InUse().IsZero() {
			t.Fatalf("seed %d: started %d of %d, %d still queued, in use %v", seed, started, submitted, s.Queued(), s.InUse())
		}
	}
}
