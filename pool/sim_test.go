package pool

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/wovyr/wovyr/autoscale"
)

// trace describes a synthetic load: Poisson arrivals at Rate per second,
// each holding its lease for an exponential time with mean Hold, against a
// pool reconciled every Tick, in simulated time.
type trace struct {
	Rate           float64
	Hold, Tick     time.Duration
	Length, Warmup time.Duration
	Seed           uint64
	MaxLive        int
	Autoscale      autoscale.Config
}

// steadyTrace is the configured capacity the hit-ratio target refers to:
// 40 acquires/s holding 100 ms each (4 in use on average), reconciled every
// 100 ms, warm target ceil(rate × 250 ms) = 10.
var steadyTrace = trace{
	Rate: 40, Hold: 100 * time.Millisecond, Tick: 100 * time.Millisecond,
	Length: 10 * time.Minute, Warmup: 30 * time.Second, Seed: 7, MaxLive: 24,
	Autoscale: autoscale.Config{Min: 1, Max: 12, Lead: 250 * time.Millisecond, RateTau: 5 * time.Second,
		IdleTTL: 30 * time.Second, RefillRate: 500, RefillBurst: 12},
}

type simResult struct {
	hits, misses, rejected uint64
	maxTarget              int
}

// simulate replays tr in simulated time on one goroutine. An arrival that
// finds the pool at MaxLive is counted as rejected rather than waited for.
func simulate(tb testing.TB, tr trace) simResult {
	r := rand.New(rand.NewPCG(tr.Seed, tr.Seed^0x9e3779b97f4a7c15))
	p, err := New(Config{Key: Key{Backend: "null", Template: "sim"}, Factory: nullFactory,
		MaxLive: tr.MaxLive, Autoscale: tr.Autoscale})
	if err != nil {
		tb.Fatal(err)
	}
	defer p.Close(context.Background())
	ctx := context.Background()
	type release struct {
		at time.Time
		l  *Lease
	}
	var (
		out      []release // ordered by at
		res      simResult
		base     Snapshot
		warmedUp bool
		in       = command("sim", nil, "true")
	)
	exp := func(mean float64) time.Duration { return time.Duration(r.ExpFloat64() * mean) }
	end := t0.Add(tr.Length)
	nextArrival := t0.Add(exp(float64(time.Second) / tr.Rate))
	nextTick := t0
	for {
		now := nextArrival
		if nextTick.Before(now) {
			now = nextTick
		}
		if len(out) > 0 && out[0].at.Before(now) {
			now = out[0].at
		}
		if now.After(end) {
			break
		}
		if !warmedUp && now.Sub(t0) >= tr.Warmup {
			base, warmedUp = p.Snapshot(), true
		}
		switch {
		case len(out) > 0 && out[0].at.Equal(now):
			out[0].l.Release()
			out = out[1:]
		case nextTick.Equal(now):
			p.Reconcile(ctx, now)
			res.maxTarget = max(res.maxTarget, p.Snapshot().Target)
			nextTick = now.Add(tr.Tick)
		default:
			nextArrival = now.Add(exp(float64(time.Second) / tr.Rate))
			if p.Snapshot().Warm == 0 && p.Snapshot().Live >= tr.MaxLive {
				res.rejected++
				continue
			}
			l, err := p.Acquire(ctx)
			if err != nil {
				tb.Fatal(err)
			}
			l.Run(ctx, in)
			rel := release{now.Add(exp(float64(tr.Hold))), l}
			i, _ := slices.BinarySearchFunc(out, rel, func(a, b release) int { return a.at.Compare(b.at) })
			out = slices.Insert(out, i, rel)
		}
	}
	s := p.Snapshot()
	res.hits, res.misses = s.Hits-base.Hits, s.Misses-base.Misses
	for _, o := range out {
		o.l.Release()
	}
	return res
}

// TestPoissonHitRatio: at the configured capacity the steady-state hit
// ratio is at least 95%. Simulated time and a fixed seed make it exact.
func TestPoissonHitRatio(t *testing.T) {
	res := simulate(t, steadyTrace)
	ratio := float64(res.hits) / float64(res.hits+res.misses)
	t.Logf("hits %d misses %d rejected %d ratio %.4f max target %d", res.hits, res.misses, res.rejected, ratio, res.maxTarget)
	if ratio < 0.95 || res.rejected != 0 {
		t.Fatalf("hit ratio %.4f (want ≥ 0.95), %d rejected", ratio, res.rejected)
	}
}

// BenchmarkPoissonHitRatio replays the steady trace (fixed seed) and
// reports its hit ratio, at the configured warm max and at tighter ones to
// show the curve; the time per op is the cost of simulating the trace.
func BenchmarkPoissonHitRatio(b *testing.B) {
	for _, mx := range []int{4, 6, 8, steadyTrace.Autoscale.Max} {
		b.Run(fmt.Sprintf("warm-max=%d", mx), func(b *testing.B) {
			tr := steadyTrace
			tr.Autoscale.Max = mx
			var res simResult
			for b.Loop() {
				res = simulate(b, tr)
			}
			b.ReportMetric(float64(res.hits)/float64(res.hits+res.misses), "hit-ratio")
			b.ReportMetric(float64(res.misses), "misses")
		})
	}
}
