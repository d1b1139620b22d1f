package pool

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/wovyr/wovyr/autoscale"
	"github.com/wovyr/wovyr/backend/oci"
	"github.com/wovyr/wovyr/sandbox"
)

// benchBackend is one backend in the side-by-side benchmark.
type benchBackend struct {
	name    string
	factory func(testing.TB) Factory
	argv    []string
	// invocation, if set, replaces the command built from argv (wasm).
	invocation func(testing.TB) *sandbox.Invocation
}

func benchBackends() []benchBackend {
	return []benchBackend{
		// null: Prepare and Run do nothing, so the numbers are the pool's own.
		{"null", func(testing.TB) Factory { return nullFactory }, []string{"true"}, nil},
		{"procbox", func(testing.TB) Factory { return procboxFactory("") }, []string{"/bin/true"}, nil},
		{"native", newNativeFactory, []string{"/bin/true"}, nil},
		{"wasm", wasmBenchFactory, nil, wasmBenchInvocation},
		{"container", ociFactory(oci.NewContainer), []string{"/bin/true"}, nil},
	}
}

type nullSandbox struct{}

func (nullSandbox) Run(context.Context, *sandbox.Invocation) (*sandbox.Result, error) {
	return &sandbox.Result{}, nil
}
func (nullSandbox) Destroy(context.Context) error { return nil }

func nullFactory(context.Context) (sandbox.Sandbox, error) { return nullSandbox{}, nil }

// BenchmarkAcquireRun runs, per backend and interleaved in one loop, a warm
// acquire+run from the pool and a cold prepare+run straight from the
// factory. Refill (Reconcile) and destroy happen outside the measured spans,
// as they do off the request path in the server. It reports medians and the
// warm acquire alone (p50/p99), which excludes the run.
func BenchmarkAcquireRun(b *testing.B) {
	for _, bb := range benchBackends() {
		b.Run(bb.name, func(b *testing.B) {
			factory := bb.factory(b)
			p, err := New(Config{Key: Key{Backend: bb.name, Template: "bench"}, Factory: factory, MaxLive: 2,
				Autoscale: autoscale.Config{Min: 1, Max: 1, RefillRate: 1e6}})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(context.Background())
			ctx := context.Background()
			in := command("bench", []string{"PATH=/usr/bin:/bin"}, bb.argv...)
			if bb.invocation != nil {
				in = bb.invocation(b)
			}
			var acq, warm, cold []time.Duration
			now := t0
			refill := func() {
				now = now.Add(time.Second)
				if err := p.Reconcile(ctx, now); err != nil || p.Snapshot().Warm != 1 {
					b.Fatalf("refill: %v, %+v", err, p.Snapshot())
				}
			}
			refill()
			for b.Loop() {
				start := time.Now()
				l, err := p.Acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				got := time.Now()
				if _, err := l.Run(ctx, in); err != nil {
					b.Fatal(err)
				}
				end := time.Now()
				if !l.Warm() {
					b.Fatal("cold acquire in the warm loop")
				}
				acq, warm = append(acq, got.Sub(start)), append(warm, end.Sub(start))
				l.Release()
				refill()

				start = time.Now()
				sb, err := factory(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := sb.Run(ctx, in); err != nil {
					b.Fatal(err)
				}
				cold = append(cold, time.Since(start))
				sb.Destroy(ctx)
			}
			report(b, "acquire-p50-µs", quantile(acq, .5))
			report(b, "acquire-p99-µs", quantile(acq, .99))
			report(b, "warm-run-p50-µs", quantile(warm, .5))
			report(b, "cold-run-p50-µs", quantile(cold, .5))
			if w := quantile(warm, .5); w > 0 {
				b.ReportMetric(float64(quantile(cold, .5))/float64(w), "cold/warm")
			}
		})
	}
}

// BenchmarkAcquireWarmParallel measures the warm hit path alone under
// contention: every goroutine acquires and releases an unused lease, which
// goes straight back warm.
func BenchmarkAcquireWarmParallel(b *testing.B) {
	p, err := New(Config{Key: Key{Backend: "null"}, Factory: nullFactory, MaxLive: 64,
		Autoscale: autoscale.Config{Min: 64, Max: 64, RefillRate: 1e6}})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(context.Background())
	if err := p.Reconcile(context.Background(), t0); err != nil {
		b.Fatal(err)
	}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := p.Acquire(context.Background())
			if err != nil {
				b.Error(err)
				return
			}
			l.Release()
		}
	})
	if s := p.Snapshot(); s.Misses != 0 {
		b.Fatalf("%d misses in a pool that never empties", s.Misses)
	}
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

func report(b *testing.B, unit string, d time.Duration) {
	b.ReportMetric(float64(d)/float64(time.Microsecond), unit)
}
