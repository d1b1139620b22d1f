package sched

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/wovyr/wovyr/resource"
)

// BenchmarkPickMixed is BenchmarkPick under DRF with mixed demands: tenant
// i's tasks are CPU-only, 1-GPU or 8-GPU (i mod 3), so charges differ by
// up to 64×, on a node where everything fits.
func BenchmarkPickMixed(b *testing.B) {
	demands := []resource.Vector{{CPUMillis: 100}, {CPUMillis: 1000, GPU: 1}, {CPUMillis: 8000, GPU: 8}}
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("tenants=%d", n), func(b *testing.B) {
			s, _ := newPair(b, Config{Capacity: everything, MaxQueued: 4 * n, Charge: ChargeDominantShare})
			now := time.Unix(0, 0)
			for i := range n {
				tn := "t" + strconv.Itoa(i)
				if err := s.AddTenant(tn, TenantConfig{Weight: int64(1 + i%8), MaxQueued: 4, MaxRunning: 4}); err != nil {
					b.Fatal(err)
				}
				for j := range 2 {
					if err := s.Submit(Task{ID: tn + "-" + strconv.Itoa(j), Tenant: tn, Demand: demands[i%3]}, now); err != nil {
						b.Fatal(err)
					}
				}
			}
			steadyPicks(b, s, now)
		})
	}
}

// gpuTrace is a busy GPU node under DRF: tenants of three kinds (60%
// CPU-only: ½..4 cores and 1..8 GiB; 30% 1-GPU; 10% 8-GPU) with weights
// drawn from 1..8, quota 4 running, every start replaced by a task of the
// same kind, tasks running 1..20 ticks. On the "gpu-server" node a GPU
// task also takes its GPUs' share of the cores and memory (8 cores and
// 64 GiB per GPU, as GPU servers are built), so CPU-only and GPU tenants
// compete for one pool; on "gpu-scarce" the GPU tasks take one core per
// GPU and the 8 GPUs are the bottleneck of 40% of the tenants. After every
// Next that answers false it asserts work conservation (idleFit). It
// returns a hash of the decisions and each tenant's charge and weight.
func gpuTrace(tb testing.TB, im impl, s *Scheduler, tenants, picks int, scarce bool) (uint64, []int64, []int64, []int) {
	r := rand.New(rand.NewPCG(26, 18))
	node := resource.Vector{CPUMillis: 64000, MemoryBytes: 512 << 30, GPU: 8}
	perGPU := resource.Vector{CPUMillis: 8000, MemoryBytes: 64 << 30, GPU: 1}
	if scarce {
		perGPU = resource.Vector{CPUMillis: 1000, MemoryBytes: 16 << 30, GPU: 1}
	}
	names := make([]string, tenants)
	weights := make([]int64, tenants)
	kinds := make([]int, tenants)
	index := map[string]int{}
	for i := range names {
		names[i] = fmt.Sprintf("t%04d", i)
		index[names[i]] = i
		weights[i] = 1 + r.Int64N(8)
		switch k := r.IntN(10); {
		case k < 6:
			kinds[i] = 0
		case k < 9:
			kinds[i] = 1
		default:
			kinds[i] = 8
		}
		if err := im.AddTenant(names[i], TenantConfig{Weight: weights[i], MaxQueued: 8, MaxRunning: 4}); err != nil {
			tb.Fatal(err)
		}
	}
	id := 0
	now := time.Unix(0, 0)
	submit := func(i int) {
		d := resource.Vector{CPUMillis: 500 * (1 + r.Int64N(8)), MemoryBytes: (1 + r.Int64N(8)) << 30}
		if kinds[i] > 0 {
			g := int64(kinds[i])
			d = resource.Vector{CPUMillis: g * perGPU.CPUMillis, MemoryBytes: g * perGPU.MemoryBytes, GPU: g}
		}
		id++
		if err := im.Submit(Task{ID: strconv.Itoa(id), Tenant: names[i], Demand: d}, now); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range names {
		submit(i)
		submit(i)
	}
	var ring [32][]string
	hash := uint64(14695981039346656037)
	for tick, n := 0, 0; n < picks; tick++ {
		now = now.Add(time.Second)
		doneDue(tb, im, &ring, tick)
		for n < picks {
			st, ok := im.Next(node, now)
			if !ok {
				if s != nil {
					if idle := idleFit(s); idle != "" {
						tb.Fatalf("pick %d: work not conserved: %s", n, idle)
					}
				}
				break
			}
			n++
			for i := 0; i < len(st.Task.ID); i++ {
				hash = (hash ^ uint64(st.Task.ID[i])) * 1099511628211
			}
			dur := 1 + r.IntN(20)
			ring[(tick+dur)%32] = append(ring[(tick+dur)%32], st.Task.ID)
			submit(index[st.Task.Tenant])
		}
	}
	charged := make([]int64, tenants)
	for i, st := range im.Snapshot() {
		charged[i] = st.Charged
	}
	return hash, charged, weights, kinds
}

// jain is Jain's index of x: (Σx)² / (n·Σx²), 1 when all are equal.
func jain(x []float64) float64 {
	var sum, sq float64
	for _, v := range x {
		sum += v
		sq += v * v
	}
	return sum * sum / (float64(len(x)) * sq)
}

// BenchmarkGPUTrace times the fast scheduler on gpuTrace (work
// conservation asserted on every pick), replays it on the DRF oracle (same
// decisions, checked) and reports: Jain's index over the tenants' weighted
// dominant shares (charged_i / w_i), overall and per kind; the largest lag
// behind and ahead of the fluid share, in which every start's charge is
// split among the earners by weight, in ShareUnit fractions of the node
// (lag_*_node) and in the tenant's own task charges (lag_*_tasks); and the
// fraction of starts that came from reservations.
func BenchmarkGPUTrace(b *testing.B) {
	const tenants, picks = 1000, 200_000
	for _, scarce := range []bool{false, true} {
		name := "gpu-server"
		if scarce {
			name = "gpu-scarce"
		}
		cfg := Config{Capacity: resource.Vector{CPUMillis: 64000, MemoryBytes: 512 << 30, GPU: 8}, Charge: ChargeDominantShare}
		b.Run(name, func(b *testing.B) {
			var hash uint64
			cpu0 := cpuSeconds()
			for range b.N {
				s, _ := newPair(b, cfg)
				hash, _, _, _ = gpuTrace(b, s, s, tenants, picks, scarce)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*picks), "ns/pick")
			b.ReportMetric((cpuSeconds()-cpu0)*1e9/float64(b.N*picks), "cpu-ns/pick")

			_, o := newPair(b, cfg)
			ideal, got, own := map[*otenant]float64{}, map[*otenant]float64{}, map[*otenant]float64{}
			var behind, ahead, behindT, aheadT float64
			reserved, total := 0, 0
			o.onPick = func(elig []*otenant, winner *otenant) {
				share := float64(shareOf(cfg.Charge, winner.queue[0].task.Demand, cfg.Capacity))
				var W int64
				for _, t := range elig {
					W += t.cfg.Weight
				}
				total++
				if winner.reserved {
					reserved++
				}
				got[winner] += share
				own[winner] = max(own[winner], share)
				for _, t := range elig {
					ideal[t] += share * float64(t.cfg.Weight) / float64(W)
					lag := ideal[t] - got[t]
					behind, ahead = max(behind, lag), max(ahead, -lag)
					if own[t] > 0 {
						behindT, aheadT = max(behindT, lag/own[t]), max(aheadT, -lag/own[t])
					}
				}
			}
			ohash, charged, weights, kinds := gpuTrace(b, o, nil, tenants, picks, scarce)
			if ohash != hash {
				b.Fatal("the fast scheduler and the oracle decided differently on the trace")
			}
			all := make([]float64, len(charged))
			byKind := map[int][]float64{}
			for i, c := range charged {
				all[i] = float64(c) / float64(weights[i])
				byKind[kinds[i]] = append(byKind[kinds[i]], all[i])
			}
			b.ReportMetric(jain(all), "jain")
			b.ReportMetric(jain(byKind[0]), "jain_cpu")
			b.ReportMetric(jain(byKind[1]), "jain_gpu1")
			b.ReportMetric(jain(byKind[8]), "jain_gpu8")
			b.ReportMetric(behind/ShareUnit, "lag_behind_node")
			b.ReportMetric(ahead/ShareUnit, "lag_ahead_node")
			b.ReportMetric(behindT, "lag_behind_tasks")
			b.ReportMetric(aheadT, "lag_ahead_tasks")
			b.ReportMetric(float64(reserved)/float64(total), "reserved_frac")
			if aheadT >= 1 {
				b.Fatalf("a tenant ran %.3f of its own tasks ahead of its share, want below 1", aheadT)
			}
		})
	}
}
