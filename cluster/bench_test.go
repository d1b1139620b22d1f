package cluster_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// BenchmarkDispatchOverhead pairs, in each iteration, the same invocation
// (/bin/true on native, waited for to the end) submitted two ways: to
// us-1 itself (a local submit) and to eu-1 with residency us-east, which
// dispatches it through NATS to us-1. The sandbox's own cost is in both;
// the paired difference is what the cluster adds: the registry look-up,
// the JetStream publish, the executing node's claim and answer, and the
// get request that waits for the end.
func BenchmarkDispatchOverhead(b *testing.B) {
	nodes := startCluster(b, 1)
	api, us := nodes[0], nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	local, remote := us.client("alice"), api.client("alice")
	dispatched := command()
	dispatched.Policy.Residency = sandbox.Residency{Regions: []string{"us-east"}}
	var l, d, diff []float64
	for b.Loop() {
		t0 := time.Now()
		rec, err := local.Submit(ctx, command(), 30*time.Second)
		if err != nil || rec.State != "done" || rec.Node != "us-1" {
			b.Fatalf("local: %+v %v", rec, err)
		}
		t1 := time.Now()
		rec, err = remote.Submit(ctx, dispatched, 30*time.Second)
		if err != nil || rec.State != "done" || rec.Node != "us-1" {
			b.Fatalf("dispatched: %+v %v", rec, err)
		}
		t2 := time.Now()
		lm, dm := ms(t1.Sub(t0)), ms(t2.Sub(t1))
		l, d, diff = append(l, lm), append(d, dm), append(diff, dm-lm)
	}
	b.ReportMetric(p(l, 50), "local-p50-ms")
	b.ReportMetric(p(d, 50), "dispatch-p50-ms")
	b.ReportMetric(p(diff, 50), "overhead-p50-ms")
	b.ReportMetric(p(diff, 90), "overhead-p90-ms")
	b.ReportMetric(0, "ns/op")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// p is the q-th percentile of xs (nearest rank).
func p(xs []float64, q int) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := (q*len(s) + 99) / 100
	return s[max(i-1, 0)]
}
