package sched

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/resource"
	"github.com/wovyr/wovyr/sandbox"
)

var drfNode = resource.Vector{CPUMillis: 8000, MemoryBytes: 64 << 30, GPU: 8}

// TestDominantShareCharge: under DRF a tenant running 8-GPU jobs (a whole
// dimension: share 1) is charged like one running eight 1-core jobs on an
// 8-core node (share 1/8 each): with equal weights the picks are a, then
// b eight times, in every period, and their charges are equal after each.
func TestDominantShareCharge(t *testing.T) {
	cfg := Config{Capacity: drfNode, Charge: ChargeDominantShare}
	for k, im := range newImpls(t, cfg, []string{"a", "b"}, []int64{1, 1}) {
		id := 0
		submit := func(tenant string, d resource.Vector) {
			id++
			if err := im.Submit(Task{ID: fmt.Sprint(id), Tenant: tenant, Demand: d}, t0); err != nil {
				t.Fatal(err)
			}
		}
		demand := map[string]resource.Vector{"a": {GPU: 8}, "b": cpu(1000)}
		submit("a", demand["a"])
		submit("b", demand["b"])
		var got strings.Builder
		for range 27 {
			st, ok := im.Next(im.Free(), t0)
			if !ok {
				t.Fatal("nothing started")
			}
			if err := im.Done(st.Task.ID); err != nil {
				t.Fatal(err)
			}
			submit(st.Task.Tenant, demand[st.Task.Tenant])
			got.WriteString(st.Task.Tenant)
		}
		if want := strings.Repeat("abbbbbbbb", 3); got.String() != want {
			t.Fatalf("impl %d: picks %s, want %s", k, got.String(), want)
		}
		a, b := statsOf(im, "a"), statsOf(im, "b")
		if a.Charged != 3*ShareUnit || b.Charged != 3*ShareUnit || a.Credit != 0 || b.Credit != 0 {
			t.Fatalf("impl %d: charged a=%d b=%d credits %d %d, want %d each and zero credits", k, a.Charged, b.Charged, a.Credit, b.Credit, 3*ShareUnit)
		}
	}
}

// TestDominantShareUnitDemandIsSWRR: on unit-demand traces (every task of
// the same demand) DRF decides exactly like plain SWRR and its oracle.
func TestDominantShareUnitDemandIsSWRR(t *testing.T) {
	unit := resource.Vector{CPUMillis: 700, MemoryBytes: 1 << 30, GPU: 1}
	for seed := range uint64(scale(30)) {
		var logs [3][]string
		for i, mk := range []func() impl{
			func() impl {
				s, _ := newPair(t, Config{Capacity: traceCapacity, MaxQueued: 400, ReserveAfter: 2})
				return s
			},
			func() impl {
				_, o := newPair(t, Config{Capacity: traceCapacity, MaxQueued: 400, ReserveAfter: 2})
				return o
			},
			func() impl {
				s, _ := newPair(t, Config{Capacity: traceCapacity, MaxQueued: 400, ReserveAfter: 2, Charge: ChargeDominantShare})
				return s
			},
		} {
			d := newDriver(t, seed)
			d.unit = &unit
			im := mk()
			for range 3000 {
				d.step([]impl{im})
			}
			logs[i] = d.log
		}
		for i := 1; i < len(logs); i++ {
			if !reflect.DeepEqual(logs[0], logs[i]) {
				for j := range min(len(logs[0]), len(logs[i])) {
					if logs[0][j] != logs[i][j] {
						t.Fatalf("seed %d step %d: impl %d differs from plain SWRR:\n %s\n %s", seed, j, i, logs[0][j], logs[i][j])
					}
				}
			}
		}
		if n := strings.Count(strings.Join(logs[0], "\n"), "→ true"); n < 100 {
			t.Fatalf("seed %d: only %d starts", seed, n)
		}
	}
}

// TestDominantShareMatchesOracle: on random mixed traces with GPU quotas,
// the fast scheduler under DRF and the O(n) oracle under DRF answer alike
// and keep identical state after every operation.
func TestDominantShareMatchesOracle(t *testing.T) {
	for _, rebase := range []int64{rebaseAt, 3} {
		for seed := range uint64(scale(40)) {
			s, o := newPair(t, Config{Capacity: traceCapacity, MaxQueued: 40, ReserveAfter: 2, Charge: ChargeDominantShare})
			s.pool.rebaseAt = rebase
			d := newDriver(t, seed)
			d.gpuQuota = true
			for range 3000 {
				d.step([]impl{s, o})
			}
		}
	}
}

// TestGPUQuota: a tenant at its GPU quota waits (others start), and a task
// over the quota is refused at Submit with ErrOverQuota, changing nothing.
func TestGPUQuota(t *testing.T) {
	cfg := Config{Capacity: drfNode, Charge: ChargeDominantShare}
	s := mustNew(t, cfg, "a", TenantConfig{Weight: 8, MaxGPU: 2}, "b", TenantConfig{Weight: 1})
	before := dump(s)
	err := s.Submit(Task{ID: "big", Tenant: "a", Demand: resource.Vector{GPU: 3}}, t0)
	if !errors.Is(err, ErrOverQuota) || !errors.Is(err, sandbox.BadInput) {
		t.Fatalf("3 GPUs over a quota of 2: %v, want ErrOverQuota and BadInput", err)
	}
	if after := dump(s); after != before {
		t.Fatalf("a refused Submit changed the state:\n%s\n%s", before, after)
	}
	mustSubmit(t, s, "a1", "a", resource.Vector{GPU: 2})
	mustSubmit(t, s, "a2", "a", resource.Vector{GPU: 1})
	mustSubmit(t, s, "b1", "b", resource.Vector{GPU: 1})
	if got := startAll(s); fmt.Sprint(got) != "[a1 b1]" {
		t.Fatalf("starts %v, want [a1 b1] (a2 waits for a's quota)", got)
	}
	if err := s.Done("a1"); err != nil {
		t.Fatal(err)
	}
	if st, ok := s.Next(s.Free(), t0); !ok || st.Task.ID != "a2" {
		t.Fatalf("after a1 is Done: %+v %v, want a2", st, ok)
	}
}

// fakePlacer places GPU tasks on numbered devices; full devices refuse.
type fakePlacer struct {
	free  []bool
	calls []string
}

func (p *fakePlacer) Place(t Task) ([]string, bool) {
	p.calls = append(p.calls, t.ID)
	var got []string
	for i, f := range p.free {
		if f && int64(len(got)) < t.Demand.GPU {
			got = append(got, fmt.Sprintf("gpu%d", i))
		}
	}
	if int64(len(got)) < t.Demand.GPU {
		return nil, false
	}
	for _, d := range got {
		var i int
		fmt.Sscanf(d, "gpu%d", &i)
		p.free[i] = false
	}
	return got, true
}

// TestPlacerDecidesGPUFit: a GPU head whose vector fits but that the
// Placer cannot place does not fit (a CPU task starts instead); a placed
// start names its devices; CPU-only tasks never reach the Placer.
func TestPlacerDecidesGPUFit(t *testing.T) {
	p := &fakePlacer{free: []bool{true, false, true, false}}
	cfg := Config{Capacity: resource.Vector{CPUMillis: 8000, GPU: 4}, Charge: ChargeDominantShare, Placer: p}
	s := mustNew(t, cfg, "g", TenantConfig{Weight: 4}, "c", TenantConfig{Weight: 1})
	mustSubmit(t, s, "g3", "g", resource.Vector{GPU: 3})
	mustSubmit(t, s, "c1", "c", cpu(1000))
	st, ok := s.Next(s.Free(), t0)
	if !ok || st.Task.ID != "c1" || st.Devices != nil {
		t.Fatalf("first start %+v %v, want c1 without devices (g3 cannot be placed on 2 free devices)", st, ok)
	}
	if err := s.Cancel("g3"); err != nil {
		t.Fatal(err)
	}
	mustSubmit(t, s, "g2", "g", resource.Vector{GPU: 2})
	st, ok = s.Next(s.Free(), t0)
	if !ok || st.Task.ID != "g2" || fmt.Sprint(st.Devices) != "[gpu0 gpu2]" {
		t.Fatalf("second start %+v %v, want g2 on [gpu0 gpu2]", st, ok)
	}
	if fmt.Sprint(p.calls) != "[g3 g3 g2]" {
		t.Fatalf("placer calls %v, want [g3 g3 g2] (never c1)", p.calls)
	}
}

// TestMultiGPUReservation: an 8-GPU head that keeps missing its turn is
// reserved after K missed turns; 1-GPU work of other tenants then waits
// for it, CPU-only work still starts beside it, and it starts as soon as
// the GPUs are free.
func TestMultiGPUReservation(t *testing.T) {
	const K = 2
	cfg := Config{Capacity: drfNode, Charge: ChargeDominantShare, ReserveAfter: K}
	for k, im := range newImpls(t, cfg, []string{"big", "one", "cpu"}, []int64{4, 1, 1}) {
		for i := range 6 {
			for _, task := range []Task{{fmt.Sprint("one", i), "one", resource.Vector{GPU: 1}}, {fmt.Sprint("cpu", i), "cpu", cpu(500)}} {
				if err := im.Submit(task, t0); err != nil {
					t.Fatal(err)
				}
			}
		}
		if st, ok := im.Next(im.Free(), t0); !ok || st.Task.ID != "one0" {
			t.Fatalf("impl %d: first start %+v", k, st)
		}
		if err := im.Submit(Task{"big0", "big", resource.Vector{GPU: 8}}, t0); err != nil {
			t.Fatal(err)
		}
		var got []string
		for !statsOf(im, "big").Reserved {
			st, ok := im.Next(im.Free(), t0)
			if !ok {
				t.Fatalf("impl %d: nothing started before big was reserved (%v)", k, got)
			}
			got = append(got, st.Task.ID)
		}
		for {
			st, ok := im.Next(im.Free(), t0)
			if !ok {
				break
			}
			if st.Task.Demand.GPU > 0 {
				t.Fatalf("impl %d: %s took a GPU while big holds a reservation", k, st.Task.ID)
			}
			got = append(got, st.Task.ID)
		}
		if statsOf(im, "cpu").Queued != 0 {
			t.Fatalf("impl %d: CPU-only work did not start beside the reservation: %v", k, got)
		}
		for _, id := range got {
			if strings.HasPrefix(id, "one") {
				if err := im.Done(id); err != nil {
					t.Fatal(err)
				}
			}
		}
		if st, ok := im.Next(im.Free(), t0); ok {
			t.Fatalf("impl %d: %s started while one0 still holds a GPU", k, st.Task.ID)
		}
		if err := im.Done("one0"); err != nil {
			t.Fatal(err)
		}
		if st, ok := im.Next(im.Free(), t0); !ok || st.Task.ID != "big0" || !st.Reserved {
			t.Fatalf("impl %d: %+v, want big0 from its reservation", k, st)
		}
	}
}

// TestWorkConservation: on random CPU / 1-GPU / 8-GPU traces, whenever
// Next answers false no queued head fits what is free minus what the
// reservations set aside: no GPU (or core) idles while a queued task it
// could serve waits, except for a reservation.
func TestWorkConservation(t *testing.T) {
	for seed := range uint64(scale(20)) {
		r := rand.New(rand.NewPCG(seed, 7))
		s := mustNew(t, Config{Capacity: drfNode, Charge: ChargeDominantShare, ReserveAfter: 3})
		for i := range 12 {
			if err := s.AddTenant(fmt.Sprint("t", i), TenantConfig{Weight: 1 + r.Int64N(8), MaxQueued: 16, MaxRunning: 4}); err != nil {
				t.Fatal(err)
			}
		}
		var running []string
		for step := range 4000 {
			tn := fmt.Sprint("t", r.IntN(12))
			d := cpu(250 * (1 + r.Int64N(8)))
			switch r.IntN(10) {
			case 0:
				d = resource.Vector{CPUMillis: 1000, GPU: 8}
			case 1, 2, 3:
				d = resource.Vector{CPUMillis: 500, GPU: 1}
			}
			_ = s.Submit(Task{ID: fmt.Sprint("k", step), Tenant: tn, Demand: d}, t0)
			for {
				st, ok := s.Next(s.Free(), t0)
				if !ok {
					break
				}
				running = append(running, st.Task.ID)
			}
			if idle := idleFit(s); idle != "" {
				t.Fatalf("seed %d step %d: %s", seed, step, idle)
			}
			for range r.IntN(3) {
				if len(running) > 0 {
					i := r.IntN(len(running))
					if err := s.Done(running[i]); err != nil {
						t.Fatal(err)
					}
					running = append(running[:i], running[i+1:]...)
				}
			}
		}
	}
}

// idleFit names a queued head that fits what Next left free, or "".
func idleFit(s *Scheduler) string {
	eff := s.Free()
	for _, t := range s.reservations {
		if t.underQuota() {
			eff = clip(eff.Sub(t.head.task.Demand))
		}
	}
	for _, t := range s.order {
		if t.head != nil && !t.reserved && t.underQuota() && t.head.task.Demand.Fits(eff) {
			return fmt.Sprintf("%s's head %s fits the idle %s", t.name, t.head.task.Demand, eff)
		}
	}
	return ""
}

// startAll starts tasks with Next(Free()) until none fits and returns
// their ids in order.
func startAll(s *Scheduler) []string {
	var got []string
	for {
		st, ok := s.Next(s.Free(), t0)
		if !ok {
			return got
		}
		got = append(got, st.Task.ID)
	}
}
