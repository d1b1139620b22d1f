package sched

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/wovyr/wovyr/resource"
)

var everything = resource.Vector{CPUMillis: 1 << 40, MemoryBytes: 1 << 50, GPU: 1 << 20}

type implMaker struct {
	name string
	make func(testing.TB, Config) impl
}

var impls = []implMaker{
	{"fast", func(tb testing.TB, c Config) impl { s, _ := newPair(tb, c); return s }},
	{"oracle", func(tb testing.TB, c Config) impl { _, o := newPair(tb, c); return o }},
}

// BenchmarkPick measures steady-state picks with every tenant backlogged and
// every task fitting: one iteration is Next, Done of the started task and
// Submit of a replacement. Weights cycle through 1..8, so D = 8 classes
// (weights=distinct gives every tenant its own weight: D = n, the fast
// structure's worst case).
func BenchmarkPick(b *testing.B) {
	for _, v := range []struct {
		n        int
		distinct bool
	}{{10, false}, {1000, false}, {10000, false}, {1000, true}} {
		for _, mk := range impls {
			name := fmt.Sprintf("tenants=%d/%s", v.n, mk.name)
			if v.distinct {
				name = fmt.Sprintf("tenants=%d/weights=distinct/%s", v.n, mk.name)
			}
			b.Run(name, func(b *testing.B) {
				im := mk.make(b, Config{Capacity: everything, MaxQueued: 4 * v.n})
				now := time.Unix(0, 0)
				for i := range v.n {
					w := int64(1 + i%8)
					if v.distinct {
						w = int64(1 + i)
					}
					tn := "t" + strconv.Itoa(i)
					if err := im.AddTenant(tn, TenantConfig{Weight: w, MaxQueued: 4, MaxRunning: 4}); err != nil {
						b.Fatal(err)
					}
					for j := range 2 {
						if err := im.Submit(Task{ID: tn + "-" + strconv.Itoa(j), Tenant: tn, Demand: resource.Vector{CPUMillis: 100}}, now); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					st, ok := im.Next(everything, now)
					if !ok {
						b.Fatal("nothing started")
					}
					if err := im.Done(st.Task.ID); err != nil {
						b.Fatal(err)
					}
					if err := im.Submit(st.Task, now); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "picks/s")
			})
		}
	}
}

// mixedTrace is a synthetic day on one node: 1,000 backlogged tenants of
// weights {1,2,3,4,5,8}, a 64-core/256 GiB/8-GPU node, tasks of mixed
// size (70% small, 25% medium, 5% one GPU) running 1..20 ticks, per-tenant
// quota 4. Every start is replaced by a new task of the same tenant, so all
// tenants stay backlogged. It returns a hash of the decisions and each
// tenant's picks.
func mixedTrace(tb testing.TB, im impl, picks int) (uint64, []int64, []int64) {
	const tenants = 1000
	r := rand.New(rand.NewPCG(42, 1))
	capacity := resource.Vector{CPUMillis: 64000, MemoryBytes: 256 << 30, GPU: 8}
	weights := make([]int64, tenants)
	names := make([]string, tenants)
	index := make(map[string]int, tenants)
	for i := range weights {
		weights[i] = []int64{1, 2, 3, 4, 5, 8}[r.IntN(6)]
		names[i] = fmt.Sprintf("t%04d", i)
		index[names[i]] = i
		if err := im.AddTenant(names[i], TenantConfig{Weight: weights[i], MaxQueued: 8, MaxRunning: 4}); err != nil {
			tb.Fatal(err)
		}
	}
	id := 0
	now := time.Unix(0, 0)
	submit := func(tenant string) {
		var d resource.Vector
		switch k := r.IntN(100); {
		case k < 70:
			d = resource.Vector{CPUMillis: 250 * (1 + r.Int64N(4)), MemoryBytes: (1 + r.Int64N(4)) << 28}
		case k < 95:
			d = resource.Vector{CPUMillis: 1000 * (2 + r.Int64N(3)), MemoryBytes: (2 + r.Int64N(7)) << 30}
		default:
			d = resource.Vector{CPUMillis: 1000, MemoryBytes: 4 << 30, GPU: 1}
		}
		id++
		if err := im.Submit(Task{ID: strconv.Itoa(id), Tenant: tenant, Demand: d}, now); err != nil {
			tb.Fatal(err)
		}
	}
	for _, n := range names {
		submit(n)
		submit(n)
	}
	var ring [32][]string
	counts := make([]int64, tenants)
	hash := uint64(14695981039346656037)
	for tick, n := 0, 0; n < picks; tick++ {
		now = now.Add(time.Second)
		for _, done := range ring[tick%32] {
			if err := im.Done(done); err != nil {
				tb.Fatal(err)
			}
		}
		ring[tick%32] = ring[tick%32][:0]
		for n < picks {
			st, ok := im.Next(capacity, now)
			if !ok {
				break
			}
			n++
			counts[index[st.Task.Tenant]]++
			for i := 0; i < len(st.Task.ID); i++ {
				hash = (hash ^ uint64(st.Task.ID[i])) * 1099511628211
			}
			dur := 1 + r.IntN(20)
			ring[(tick+dur)%32] = append(ring[(tick+dur)%32], st.Task.ID)
			submit(st.Task.Tenant)
		}
	}
	return hash, counts, weights
}

// BenchmarkMixedTrace times the fast scheduler on the mixed trace, then
// replays the trace on the oracle (same decisions, checked) to measure
// fairness: Jain's index over the tenants' weight-normalised picks, and the
// largest lag behind and ahead of the fluid share, where every pick gives
// each eligible tenant w_i/Σw_eligible of a pick.
func BenchmarkMixedTrace(b *testing.B) {
	const picks = 200_000
	var hash uint64
	for range b.N {
		s, _ := newPair(b, Config{Capacity: resource.Vector{CPUMillis: 64000, MemoryBytes: 256 << 30, GPU: 8}})
		hash, _, _ = mixedTrace(b, s, picks)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*picks), "ns/pick")
	b.StopTimer()

	_, o := newPair(b, Config{Capacity: resource.Vector{CPUMillis: 64000, MemoryBytes: 256 << 30, GPU: 8}})
	ideal := map[*otenant]float64{}
	got := map[*otenant]float64{}
	var behind, ahead float64
	o.onPick = func(elig []*otenant, winner *otenant) {
		var W int64
		for _, t := range elig {
			W += t.cfg.Weight
		}
		got[winner]++
		for _, t := range elig {
			ideal[t] += float64(t.cfg.Weight) / float64(W)
			lag := ideal[t] - got[t]
			behind, ahead = max(behind, lag), max(ahead, -lag)
		}
	}
	ohash, counts, weights := mixedTrace(b, o, picks)
	if ohash != hash {
		b.Fatal("the fast scheduler and the oracle decided differently on the mixed trace")
	}
	var sum, sq float64
	for i, c := range counts {
		x := float64(c) / float64(weights[i])
		sum += x
		sq += x * x
	}
	b.ReportMetric(sum*sum/(float64(len(counts))*sq), "jain")
	b.ReportMetric(behind, "maxlag_behind_picks")
	b.ReportMetric(ahead, "maxlag_ahead_picks")
	var skips, reserved uint64
	for _, st := range o.Snapshot() {
		_ = st
	}
	for _, t := range o.tenants {
		for _, k := range t.queue {
			skips += uint64(k.skips)
		}
	}
	_ = reserved
}
