package wasm

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// BenchmarkGrantedInvocation is the price of the descriptor bound: a
// trivial guest granted a directory, through the Backend, in this process
// (no bound: the weakened configuration) and through a worker process (the
// certified one). "grant" is a read-only Config.Preopens directory;
// "workspace" has one file in, so a fresh tmpfs /workspace each time.
func BenchmarkGrantedInvocation(b *testing.B) {
	mod := guest(b, "wat/tiny")
	dir := b.TempDir()
	for _, k := range []string{"grant", "workspace"} {
		for _, c := range []struct {
			name   string
			worker []string
		}{{"in-process", nil}, {"worker", testWorker}} {
			b.Run(k+"/"+c.name, func(b *testing.B) {
				be := newBackend(b, func(cfg *Config) {
					cfg.Worker = c.worker
					if k == "grant" {
						cfg.Preopens = []Preopen{{Host: dir, Guest: "/data"}}
					}
				})
				in := func() *sandbox.Invocation {
					if k == "workspace" {
						return withWork(inv(mod, "tiny"))
					}
					return inv(mod, "tiny")
				}
				run(b, be, in()) // start the worker, load the module
				ds := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					t0 := time.Now()
					if res := run(b, be, in()); res.Class != sandbox.OK {
						b.Fatalf("%+v", res)
					}
					ds = append(ds, time.Since(t0))
				}
				b.ReportMetric(pct(ds, 0.5), "p50-µs")
				b.ReportMetric(pct(ds, 0.99), "p99-µs")
			})
		}
	}
}

// BenchmarkGrantedThroughput: trivial invocations granted a read-only
// directory (so each runs in a worker) from parallel goroutines.
func BenchmarkGrantedThroughput(b *testing.B) {
	mod := guest(b, "wat/tiny")
	dir := b.TempDir()
	be := newBackend(b, func(cfg *Config) { cfg.Preopens = []Preopen{{Host: dir, Guest: "/data"}} })
	run(b, be, inv(mod, "tiny"))
	var n atomic.Int64
	b.ResetTimer()
	t0 := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if res := run(b, be, inv(mod, "tiny")); res.Class != sandbox.OK {
				b.Error(res)
				return
			}
			n.Add(1)
		}
	})
	b.ReportMetric(float64(n.Load())/time.Since(t0).Seconds(), "inv/s")
}

// namingWat is tiny.wat importing fd_prestat_get, which it never calls:
// a module that could find a preopen, so it is given its workspace.
const namingWat = `(module
  (import "wasi_snapshot_preview1" "fd_prestat_get" (func (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")))`

// BenchmarkWorkspaceWithoutFiles is the price of a workspace that is there
// without files (issue #20 item 7): the same trivial guest, given no
// files, that cannot name a path (no workspace, in-process) and that can
// (a fresh tmpfs workspace, in a worker), side by side.
func BenchmarkWorkspaceWithoutFiles(b *testing.B) {
	be := newBackend(b)
	for _, c := range []struct {
		name string
		mod  []byte
	}{{"cannot-name-paths", guest(b, "wat/tiny")}, {"names-paths", mustWat(b, namingWat)}} {
		b.Run(c.name, func(b *testing.B) {
			run(b, be, inv(c.mod, "tiny"))
			ds := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if res := run(b, be, inv(c.mod, "tiny")); res.Class != sandbox.OK {
					b.Fatalf("%+v", res)
				}
				ds = append(ds, time.Since(t0))
			}
			b.ReportMetric(pct(ds, 0.5), "p50-µs")
			b.ReportMetric(pct(ds, 0.99), "p99-µs")
		})
	}
}
