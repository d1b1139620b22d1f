package plugin

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/plugin/plugintest"
)

// The benchmarks pair wovyr's path with the bare Wasmtime C API in a C
// loop (wasmcapi.RawLoop) in the same run, and report medians and the
// ratio (DESIGN §8):
//
//	go test ./plugin -run '^$' -bench 'Instantiate|Call' -benchtime 20000x
//	go test ./plugin -run '^$' -bench 'LoadFromCache/calc' -benchtime 50x
//	go test ./plugin -run '^$' -bench 'LoadFromCache/jsdemo' -benchtime 3x

func report(b *testing.B, ours, raw []time.Duration) {
	p := func(d []time.Duration, q float64) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[int(q*float64(len(s)-1))].Nanoseconds())
	}
	b.ReportMetric(p(ours, 0.5), "p50-ns")
	b.ReportMetric(p(ours, 0.99), "p99-ns")
	b.ReportMetric(p(raw, 0.5), "raw-p50-ns")
	b.ReportMetric(p(ours, 0.5)/p(raw, 0.5), "ratio")
}

// calcFromCache is calc deserialized from its serialized artifact, as a
// restarted daemon has it, with a linker and its add export.
func calcFromCache(b *testing.B) (*wasmcapi.Engine, *wasmcapi.Linker, *wasmcapi.Component, *wasmcapi.Export) {
	e, err := wasmcapi.NewEngine(wasmcapi.EngineConfig{PoolSlots: 64, ComponentSlots: 16, MaxMemory: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.Close)
	c, err := e.CompileComponent(component(b, "calc"))
	if err != nil {
		b.Fatal(err)
	}
	art, _ := c.Serialize()
	c.Close()
	if c, err = e.DeserializeComponent(art); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	l, err := e.NewLinker(false)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(l.Close)
	add, _ := c.Func("add")
	return e, l, c, add
}

// BenchmarkComponentInstantiate: a fresh instance (store, limits, fuel,
// epoch deadline) of the cached calc component from the pool, and its
// release.
func BenchmarkComponentInstantiate(b *testing.B) {
	_, l, c, add := calcFromCache(b)
	ours := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		in, err := l.Instantiate(c, wasmcapi.Limits{Memory: 64 << 20})
		if err != nil {
			b.Fatal(err)
		}
		in.Close()
		ours = append(ours, time.Since(t0))
	}
	b.StopTimer()
	raw, err := l.RawLoop(c, add, wasmcapi.RawInstantiate, b.N)
	if err != nil {
		b.Fatal(err)
	}
	report(b, ours, raw)
}

// BenchmarkComponentCallAdd: add(40, 2) on one instance through wasmcapi
// (typed values, the codec, fuel and deadline set per call).
func BenchmarkComponentCallAdd(b *testing.B) {
	_, l, c, add := calcFromCache(b)
	in, err := l.Instantiate(c, wasmcapi.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	args := []wasmcapi.Val{{Kind: wasmcapi.KindU32, Uint: 40}, {Kind: wasmcapi.KindU32, Uint: 2}}
	ours := make([]time.Duration, 0, b.N)
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		r, err := in.Call(ctx, add, args, wasmcapi.CallSpec{Fuel: 1e6, Wall: time.Second})
		if err != nil || r.Result.Uint != 42 {
			b.Fatal(r, err)
		}
		ours = append(ours, time.Since(t0))
	}
	b.StopTimer()
	raw, err := l.RawLoop(c, add, wasmcapi.RawCall, b.N)
	if err != nil {
		b.Fatal(err)
	}
	report(b, ours, raw)
}

// BenchmarkPluginCallAdd: the whole host path of one call, as the HTTP
// API makes it: JSON arguments checked against the WIT signature, the
// tenant's idle instance, the call, the JSON result. It alternates blocks
// of 1,000 calls with 1,000 of the raw C loop, so that both see the same
// machine (a noisy one moves both).
func BenchmarkPluginCallAdd(b *testing.B) {
	h := newHost(b, Config{})
	calc := component(b, "calc")
	if _, err := h.Load(signed("calc", calc), calc); err != nil {
		b.Fatal(err)
	}
	_, l, c, add := calcFromCache(b)
	args := json.RawMessage(`{"a": 40, "b": 2}`)
	ctx := context.Background()
	ours := make([]time.Duration, 0, b.N)
	var raw []time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; {
		block := min(1000, b.N-done)
		for range block {
			t0 := time.Now()
			r, err := h.Call(ctx, "t", "calc", "add", args, CallOptions{})
			if err != nil || string(r.Value) != "42" {
				b.Fatal(r, err)
			}
			ours = append(ours, time.Since(t0))
		}
		b.StopTimer()
		rb, err := l.RawLoop(c, add, wasmcapi.RawCall, block)
		if err != nil {
			b.Fatal(err)
		}
		raw = append(raw, rb...)
		b.StartTimer()
		done += block
	}
	b.StopTimer()
	report(b, ours, raw)
}

// BenchmarkPluginCallMethod: a method call on a resource the tenant holds
// ([method]counter.incr through its handle: the held instance found by
// the handle, its turn taken and given back), alternating on one host with
// calc's add, which runs on any idle instance; the difference of their
// medians is what holding a resource costs a call.
//
//	go test ./plugin -run '^$' -bench PluginCallMethod -benchtime 20000x -count 2
func BenchmarkPluginCallMethod(b *testing.B) {
	h := newHost(b, Config{})
	for _, name := range []string{"calc", "tally"} {
		wasm := component(b, name)
		if _, err := h.Load(signed(name, wasm), wasm); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	r, err := h.Call(ctx, "t", "tally", counters+"[constructor]counter", json.RawMessage(`{"start": 0}`), CallOptions{})
	if err != nil || r.End != "ok" {
		b.Fatal(r, err)
	}
	incr := json.RawMessage(`{"self": ` + string(r.Value) + `, "by": 1}`)
	add := json.RawMessage(`{"a": 40, "b": 2}`)
	ours := make([]time.Duration, 0, b.N)
	peer := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		r, err := h.Call(ctx, "t", "tally", counters+"[method]counter.incr", incr, CallOptions{})
		if err != nil || r.End != "ok" {
			b.Fatal(r, err)
		}
		t1 := time.Now()
		if r, err = h.Call(ctx, "t", "calc", "add", add, CallOptions{}); err != nil || string(r.Value) != "42" {
			b.Fatal(r, err)
		}
		ours, peer = append(ours, t1.Sub(t0)), append(peer, time.Since(t1))
	}
	b.StopTimer()
	report(b, ours, peer)
}

// BenchmarkPluginLoadFromCache: installing a component on a host whose
// directory holds its sealed artifact (a daemon restart), against
// compiling it: calc (C, 2.9 KB) and jsdemo (JavaScript, StarlingMonkey,
// about 12 MB; built with jco, skipped where npm cannot install it).
//
//	go test ./plugin -run '^$' -bench 'LoadFromCache/calc' -benchtime 50x
//	go test ./plugin -run '^$' -bench 'LoadFromCache/jsdemo' -benchtime 3x
func BenchmarkPluginLoadFromCache(b *testing.B) {
	for _, name := range []string{"calc", "jsdemo"} {
		b.Run(name, func(b *testing.B) {
			var wasm []byte
			if name == "jsdemo" {
				wasm = plugintest.JS(b, plugintest.Jco(b), name)
			} else {
				wasm = component(b, name)
			}
			benchLoad(b, name, wasm)
		})
	}
}

func benchLoad(b *testing.B, name string, wasm []byte) {
	dir := b.TempDir()
	m := signed(name, wasm)
	h := newHost(b, Config{Dir: dir})
	cold := newHost(b, Config{})
	if _, err := h.Load(m, wasm); err != nil {
		b.Fatal(err)
	}
	h.bg.Wait() // a large component's optimized code, sealed in the background (tier.go)
	ours := make([]time.Duration, 0, b.N)
	compile := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		if err := h.Remove(name); err != nil { // a restarted daemon has none to replace, untimed
			b.Fatal(err)
		}
		t0 := time.Now()
		if _, err := h.Load(m, wasm); err != nil {
			b.Fatal(err)
		}
		ours = append(ours, time.Since(t0))
		t0 = time.Now()
		if _, err := cold.Load(m, wasm); err != nil {
			b.Fatal(err)
		}
		compile = append(compile, time.Since(t0)) // the first load: a large component's quick compile
		cold.bg.Wait()                            // its tier-up, untimed
	}
	b.StopTimer()
	report(b, ours, compile) // here "raw" is a cold compile
}

// BenchmarkHostCall: rand's roll, whose one import a Go HostFunc answers,
// against calc's add on the same engine, each through wasmcapi on one
// instance, alternating: host-call-ns is what the call into Go adds.
func BenchmarkHostCall(b *testing.B) {
	e, l, c, add := calcFromCache(b)
	rand, err := e.CompileComponent(component(b, "rand"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rand.Close)
	hl, err := e.NewLinker(false)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(hl.Close)
	seven := func(context.Context, []wasmcapi.Val) (*wasmcapi.Val, error) {
		return &wasmcapi.Val{Kind: wasmcapi.KindU64, Uint: 7}, nil
	}
	if err := hl.Define("wasi:random/random@0.2.0", map[string]wasmcapi.HostFunc{"get-random-u64": seven}); err != nil {
		b.Fatal(err)
	}
	ri, err := hl.Instantiate(rand, wasmcapi.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	defer ri.Close()
	ai, err := l.Instantiate(c, wasmcapi.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	defer ai.Close()
	roll, _ := rand.Func("roll")
	args := []wasmcapi.Val{{Kind: wasmcapi.KindU32, Uint: 40}, {Kind: wasmcapi.KindU32, Uint: 2}}
	spec := wasmcapi.CallSpec{Fuel: 1e6, Wall: time.Second}
	ctx := context.Background()
	ours := make([]time.Duration, 0, b.N)
	plain := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		r, err := ri.Call(ctx, roll, nil, spec)
		if err != nil || r.Result.Uint != 7 {
			b.Fatal(r, err)
		}
		t1 := time.Now()
		if r, err = ai.Call(ctx, add, args, spec); err != nil || r.Result.Uint != 42 {
			b.Fatal(r, err)
		}
		ours, plain = append(ours, t1.Sub(t0)), append(plain, time.Since(t1))
	}
	b.StopTimer()
	report(b, ours, plain)
	slices.Sort(ours)
	slices.Sort(plain)
	b.ReportMetric(float64((ours[len(ours)/2] - plain[len(plain)/2]).Nanoseconds()), "host-call-ns")
}
