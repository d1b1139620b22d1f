package wasm

import (
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// BenchmarkWorkspaceInvocation is the price of the descriptor bound: a
// trivial guest granted /work (one file in, so a fresh tmpfs workspace
// each time) through the Backend, in this process (no bound: the weakened
// configuration) and through a worker process (the certified one).
func BenchmarkWorkspaceInvocation(b *testing.B) {
	mod := guest(b, "wat/tiny")
	for _, c := range []struct {
		name   string
		worker []string
	}{{"in-process", nil}, {"worker", testWorker}} {
		b.Run(c.name, func(b *testing.B) {
			be := newBackend(b, func(cfg *Config) { cfg.Worker = c.worker })
			run(b, be, withWork(inv(mod, "tiny"))) // start the worker, load the module
			ds := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if res := run(b, be, withWork(inv(mod, "tiny"))); res.Class != sandbox.OK {
					b.Fatalf("%+v", res)
				}
				ds = append(ds, time.Since(t0))
			}
			b.ReportMetric(pct(ds, 0.5), "p50-µs")
			b.ReportMetric(pct(ds, 0.99), "p99-µs")
		})
	}
}
