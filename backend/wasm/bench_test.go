package wasm

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/manager"
	"github.com/wovyr/wovyr/sandbox"
)

// Benchmarks for docs/BENCHMARKS.md (wasm section). Run:
//
//	go test ./backend/wasm -run '^$' -bench . -benchtime 20000x -cpu 2

func pct(ds []time.Duration, p float64) float64 {
	slices.Sort(ds)
	return float64(ds[int(float64(len(ds)-1)*p)].Nanoseconds()) / 1e3
}

// instantiateToStart measures, from the compiled-module cache, store + WASI
// setup + instantiation from the pool until just before _start's first
// instruction.
func instantiateToStart(b *testing.B, mod []byte, argv ...string) {
	be := newBackend(b)
	if err := be.started(); err != nil {
		b.Fatal(err)
	}
	e, err := be.modules.acquire(mod)
	if err != nil {
		b.Fatal(err)
	}
	defer be.modules.release(e)
	spec := &wasmcapi.Spec{Argv: argv, Wall: 10 * time.Second, Memory: 256 << 20, Output: 1 << 20}
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		o := e.pre.Run(context.Background(), spec)
		if o.End != wasmcapi.EndExit {
			b.Fatalf("%+v", o)
		}
		ds = append(ds, o.Total-o.Run)
	}
	b.ReportMetric(pct(ds, 0.5), "p50-µs")
	b.ReportMetric(pct(ds, 0.99), "p99-µs")
}

func BenchmarkInstantiateTiny(b *testing.B) { instantiateToStart(b, guest(b, "wat/tiny"), "tiny") }

func BenchmarkInstantiateGo(b *testing.B) {
	instantiateToStart(b, guest(b, "goguest"), "goguest", "exit", "0")
}

// bareFloor is the same trivial invocation through plain wasmtime-go calls:
// a default engine (no pool), a linker with WASI made once, and per call a
// store with fuel, an epoch deadline and a WASI config, instantiate, _start.
type bareFloor struct {
	engine *wasmtime.Engine
	linker *wasmtime.Linker
	module *wasmtime.Module
}

func newBareFloor(b testing.TB, mod []byte) *bareFloor {
	cfg := wasmtime.NewConfig()
	cfg.SetConsumeFuel(true)
	cfg.SetEpochInterruption(true)
	e := wasmtime.NewEngineWithConfig(cfg)
	l := wasmtime.NewLinker(e)
	if err := l.DefineWasi(); err != nil {
		b.Fatal(err)
	}
	m, err := wasmtime.NewModule(e, mod)
	if err != nil {
		b.Fatal(err)
	}
	return &bareFloor{engine: e, linker: l, module: m}
}

func (f *bareFloor) run(b testing.TB) {
	s := wasmtime.NewStore(f.engine)
	s.SetFuel(1 << 40)
	s.SetEpochDeadline(1 << 30)
	w := wasmtime.NewWasiConfig()
	w.SetArgv([]string{"tiny"})
	s.SetWasi(w)
	inst, err := f.linker.Instantiate(s, f.module)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := inst.GetFunc(s, "_start").Call(s); err != nil {
		b.Fatal(err)
	}
	s.Close()
}

// certifiedManager is a manager whose only backend is be, with a passing
// certification record made for its current key (the battery itself is not
// what is measured here).
func certifiedManager(b testing.TB, be *Backend) *manager.Manager {
	capa := be.Probe(context.Background())
	rec := cert.Record{Key: cert.Key{Backend: Name, RuntimeVersion: capa.Version, Kernel: cert.Kernel(), ConfigHash: capa.ConfigHash},
		Passed: true, Outcomes: []cert.Outcome{{ID: 61, Name: "stub for benchmarks", Applies: true, Pass: true, ControlFlagged: true}}}
	m, err := manager.New(manager.Config{Backends: []sandbox.Backend{be}, Certs: cert.Set{rec}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkTrivialSideBySide alternates one trivial invocation through the
// manager (validate, select, Prepare, Run, Destroy), through the Backend
// alone, and through bare wasmtime-go; it reports the three medians and the
// manager path's ratio to the bare floor.
func BenchmarkTrivialSideBySide(b *testing.B) {
	mod := guest(b, "wat/tiny")
	be := newBackend(b)
	mgr := certifiedManager(b, be)
	floor := newBareFloor(b, mod)
	ctx := context.Background()
	in := inv(mod, "tiny")
	run(b, be, in) // warm the cache
	var viaMgr, viaBackend, bare []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		in.ID = ""
		res, err := mgr.Run(ctx, in)
		viaMgr = append(viaMgr, time.Since(t0))
		if err != nil || res.Class != sandbox.OK || res.Backend != Name {
			b.Fatal(err, res)
		}
		t0 = time.Now()
		sb, _ := be.Prepare(ctx, sandbox.Template{Kind: sandbox.KindWasm})
		res, err = sb.Run(ctx, in)
		sb.Destroy(ctx)
		viaBackend = append(viaBackend, time.Since(t0))
		if err != nil || res.Class != sandbox.OK {
			b.Fatal(err, res)
		}
		t0 = time.Now()
		floor.run(b)
		bare = append(bare, time.Since(t0))
	}
	m, o, f := pct(viaMgr, 0.5), pct(viaBackend, 0.5), pct(bare, 0.5)
	b.ReportMetric(m, "manager-p50-µs")
	b.ReportMetric(o, "backend-p50-µs")
	b.ReportMetric(f, "bare-p50-µs")
	b.ReportMetric(m/f, "manager/bare")
}

// BenchmarkThroughput runs trivial invocations end to end through the
// manager from parallel goroutines (-cpu sets how many cores) and reports
// invocations per second.
func BenchmarkThroughput(b *testing.B) {
	mod := guest(b, "wat/tiny")
	be := newBackend(b)
	mgr := certifiedManager(b, be)
	run(b, be, inv(mod, "tiny"))
	ctx := context.Background()
	var n atomic.Int64
	b.ResetTimer()
	t0 := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := mgr.Run(ctx, inv(mod, "tiny"))
			if err != nil || res.Class != sandbox.OK {
				b.Error(err, res)
				return
			}
			n.Add(1)
		}
	})
	b.ReportMetric(float64(n.Load())/time.Since(t0).Seconds(), "inv/s")
}

// BenchmarkDeadlineOvershoot measures how far past its wall deadline a
// spinning guest is stopped (the epoch tick is 1ms).
func BenchmarkDeadlineOvershoot(b *testing.B) {
	mod := guest(b, "wat/spin")
	be := newBackend(b)
	in := inv(mod, "spin")
	in.Limits.Wall = 5 * time.Millisecond
	var mu sync.Mutex
	var over []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res := run(b, be, in)
		if res.Class != sandbox.Timeout {
			b.Fatal(res.Class)
		}
		mu.Lock()
		over = append(over, res.Usage.Wall-in.Limits.Wall)
		mu.Unlock()
	}
	b.ReportMetric(pct(over, 0.5), "p50-over-µs")
	b.ReportMetric(pct(over, 0.99), "p99-over-µs")
}
