package sched

import (
	"fmt"
	"math"
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

// BenchmarkPick measures steady-state picks (picks/s by the wall clock,
// picks/cpu-s by the process's CPU time, which a loaded machine distorts
// less; run with -cpu 1) with every tenant backlogged and
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
				steadyPicks(b, im, now)
			})
		}
	}
}

// steadyPicks is the measured loop of the pick benchmarks: Next, Done of
// the started task and Submit of it again, b.N times, everything fitting.
func steadyPicks(b *testing.B, im impl, now time.Time) {
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuSeconds()
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
	cpu := cpuSeconds() - cpu0
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "picks/s")
	if cpu > 0 {
		b.ReportMetric(float64(b.N)/cpu, "picks/cpu-s")
	}
}

// mixedTrace is a synthetic busy node: 1,000 tenants of weights drawn from
// {1,2,3,4,5,8} on a 64-core, 256 GiB, 8-GPU node; every start is replaced
// by a new task of the same tenant, so every tenant stays backlogged; tasks
// run 1..20 ticks and Done is called as they end. Two flavours:
//
//   - uniform: every task is {1 core, 1 GiB} and the quota (64) never
//     binds: whenever one head fits, all do — pure SWRR.
//   - mixed: 70% small (¼..1 core, ¼..1 GiB), 25% medium (2..4 cores,
//     2..8 GiB), 5% one GPU; quota 4. Heads often do not fit, so
//     skips and reservations are constantly in play.
//
// It returns a hash of the decisions, each tenant's picks and weight, and
// the mean fraction of the node's CPU in use over the ticks.
func mixedTrace(tb testing.TB, im impl, picks int, mixed bool) (uint64, []int64, []int64, float64) {
	const tenants = 1000
	r := rand.New(rand.NewPCG(42, 1))
	capacity := traceNode
	quota := 64
	if mixed {
		quota = 4
	}
	weights := make([]int64, tenants)
	names := make([]string, tenants)
	index := make(map[string]int, tenants)
	for i := range weights {
		weights[i] = []int64{1, 2, 3, 4, 5, 8}[r.IntN(6)]
		names[i] = fmt.Sprintf("t%04d", i)
		index[names[i]] = i
		if err := im.AddTenant(names[i], TenantConfig{Weight: weights[i], MaxQueued: 8, MaxRunning: quota}); err != nil {
			tb.Fatal(err)
		}
	}
	id := 0
	now := time.Unix(0, 0)
	submit := func(tenant string) {
		d := resource.Vector{CPUMillis: 1000, MemoryBytes: 1 << 30}
		switch k := r.IntN(100); {
		case !mixed:
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
	var util float64
	ticks := 0
	for tick, n := 0, 0; n < picks; tick++ {
		now = now.Add(time.Second)
		doneDue(tb, im, &ring, tick)
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
		util += 1 - float64(im.Free().CPUMillis)/float64(capacity.CPUMillis)
		ticks++
	}
	return hash, counts, weights, util / float64(ticks)
}

// doneDue ends the trace's tasks due at tick (ring holds each tick's ends,
// modulo 32).
func doneDue(tb testing.TB, im impl, ring *[32][]string, tick int) {
	for _, done := range ring[tick%32] {
		if err := im.Done(done); err != nil {
			tb.Fatal(err)
		}
	}
	ring[tick%32] = ring[tick%32][:0]
}

var traceNode = resource.Vector{CPUMillis: 64000, MemoryBytes: 256 << 30, GPU: 8}

// BenchmarkMixedTrace times the fast scheduler on each flavour of the trace,
// then replays it on the oracle (same decisions, checked) to measure
// fairness: Jain's index over the tenants' weight-normalised picks
// (picks_i/w_i; every tenant is backlogged throughout); the largest lag
// (the package doc's definition) behind and ahead of the fluid share, in
// which every pick gives each earner (queued, under quota) w_i/Σw of a
// pick, and max_lag, the larger of the two; and the largest
// |picks·w_i/Σw_all − picks_i| (lag_share, sampled every 100 picks)
// against the whole-run weighted share.
func BenchmarkMixedTrace(b *testing.B) {
	const picks = 200_000
	for _, v := range []struct {
		name  string
		mixed bool
		k     int
	}{{"uniform", false, 0}, {"mixed", true, 0}, {"mixed/K=2", true, 2}, {"mixed/K=64", true, 64}} {
		mixed, cfg := v.mixed, Config{Capacity: traceNode, ReserveAfter: v.k}
		b.Run(v.name, func(b *testing.B) {
			var hash uint64
			cpu0 := cpuSeconds()
			for range b.N {
				s, _ := newPair(b, cfg)
				hash, _, _, _ = mixedTrace(b, s, picks, mixed)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*picks), "ns/pick")
			b.ReportMetric((cpuSeconds()-cpu0)*1e9/float64(b.N*picks), "cpu-ns/pick")

			_, o := newPair(b, cfg)
			ideal := map[*otenant]float64{}
			got := map[*otenant]float64{}
			var behind, ahead, share float64
			reserved, total := 0, 0
			var wall int64 // Σ weights of all tenants (all are backlogged)
			o.onPick = func(elig []*otenant, winner *otenant) {
				if wall == 0 {
					for _, t := range o.tenants {
						wall += t.cfg.Weight
					}
				}
				total++
				if total%100 == 0 { // lag against the whole-run weighted share
					for _, t := range o.tenants {
						share = max(share, math.Abs(float64(total)*float64(t.cfg.Weight)/float64(wall)-got[t]))
					}
				}
				var W int64
				for _, t := range elig {
					W += t.cfg.Weight
				}
				got[winner]++
				if winner.reserved {
					reserved++
				}
				for _, t := range elig {
					ideal[t] += float64(t.cfg.Weight) / float64(W)
					lag := ideal[t] - got[t]
					behind, ahead = max(behind, lag), max(ahead, -lag)
				}
			}
			ohash, counts, weights, util := mixedTrace(b, o, picks, mixed)
			if ohash != hash {
				b.Fatal("the fast scheduler and the oracle decided differently on the trace")
			}
			var sum, sq float64
			for i, c := range counts {
				x := float64(c) / float64(weights[i])
				sum += x
				sq += x * x
			}
			b.ReportMetric(sum*sum/(float64(len(counts))*sq), "jain")
			b.ReportMetric(behind, "lag_behind_picks")
			b.ReportMetric(ahead, "lag_ahead_picks")
			b.ReportMetric(max(behind, ahead), "max_lag_picks")
			b.ReportMetric(share, "lag_share_picks")
			b.ReportMetric(float64(reserved)/picks, "reserved_frac")
			b.ReportMetric(util, "cpu_util")
		})
	}
}
