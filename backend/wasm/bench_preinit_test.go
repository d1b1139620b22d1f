package wasm

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/sandbox"
)

// Pre-initialisation benchmarks (docs/BENCHMARKS.md, issue 17). Run:
//
//	go test ./backend/wasm -run '^$' -bench Preinit -benchtime 50x -cpu 2

// BenchmarkPreinitInstantiate measures, paired in one loop, instantiate to
// just before _start (store, WASI, instance from the pool) of stateWAT as
// compiled and of its pre-initialised form, whose memory image holds what
// init wrote (copy-on-write from the pooling allocator).
func BenchmarkPreinitInstantiate(b *testing.B) {
	be := newBackend(b)
	if err := be.started(); err != nil {
		b.Fatal(err)
	}
	orig := stateModule(b, "init")
	pre, err := preinitialise(context.Background(), orig, "init", initBounds{wall: 10 * time.Second, memory: 1 << 24})
	if err != nil {
		b.Fatal(err)
	}
	spec := &wasmcapi.Spec{Argv: []string{"state"}, Wall: 10 * time.Second, Memory: 256 << 20, Output: 1 << 20}
	var es [2]*entry
	for i, m := range [][]byte{orig, pre} {
		if es[i], err = be.modules.acquire(m); err != nil {
			b.Fatal(err)
		}
		defer be.modules.release(es[i])
	}
	ds := [2][]time.Duration{}
	b.ResetTimer()
	for range b.N {
		for i, want := range []string{lazyOut, snapOut} {
			o := es[i].pre.Run(context.Background(), spec)
			if o.End != wasmcapi.EndExit || string(o.Stdout) != want {
				b.Fatalf("%+v", o)
			}
			ds[i] = append(ds[i], o.Total-o.Run)
		}
	}
	b.ReportMetric(pct(ds[0], 0.5), "orig-p50-µs")
	b.ReportMetric(pct(ds[1], 0.5), "preinit-p50-µs")
	b.ReportMetric(pct(ds[1], 0.99), "preinit-p99-µs")
}

// heavySteps makes heavyWAT's init take well over 10 ms here.
const heavySteps = 10_000_000

// BenchmarkPreinitFirstCall measures, paired in one loop, a fresh
// invocation's wall time through Sandbox.Run (prepare, run, result) of a
// module whose init takes ≥ 10 ms: without pre-initialisation (the same
// module without the init export, so its _start runs init itself) and
// with it (the artifact made once, before the loop; its time is reported
// as init-ms).
func BenchmarkPreinitFirstCall(b *testing.B) {
	be := privateBackend(b)
	ctx := context.Background()
	pre := heavyModule(b, heavySteps)
	lazy := mustWat(b, strings.Replace(fmt.Sprintf(heavyWAT, heavySteps), `(export "wizer.initialize")`, "", 1))
	call := func(mod []byte) (time.Duration, string) {
		t0 := time.Now()
		sb, err := be.Prepare(ctx, sandbox.Template{Kind: sandbox.KindWasm})
		if err != nil {
			b.Fatal(err)
		}
		res, err := sb.Run(ctx, inv(mod, "heavy"))
		if err != nil || res.Class != sandbox.OK {
			b.Fatalf("%v %+v", err, res)
		}
		sb.Destroy(ctx)
		return time.Since(t0), string(res.Stdout)
	}
	t0 := time.Now()
	_, want := call(pre) // makes the artifact
	initTime := time.Since(t0)
	_, got := call(lazy) // compiles the lazy module
	if got != want {
		b.Fatalf("lazy %q, pre-initialised %q", got, want)
	}
	ds := [2][]time.Duration{}
	b.ResetTimer()
	for range b.N {
		for i, m := range [][]byte{lazy, pre} {
			d, out := call(m)
			if out != want {
				b.Fatalf("stdout %q, want %q", out, want)
			}
			ds[i] = append(ds[i], d)
		}
	}
	without, with := pct(ds[0], 0.5), pct(ds[1], 0.5)
	b.ReportMetric(without, "without-p50-µs")
	b.ReportMetric(with, "preinit-p50-µs")
	b.ReportMetric(without/with, "speedup-x")
	b.ReportMetric(float64(initTime.Microseconds())/1e3, "init-ms")
}
