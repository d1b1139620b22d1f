package wasmcapi

import (
	"context"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The test components are built from source beside them in package plugin's
// testdata (plugin's tests rebuild them with clang and jco and check the
// committed bytes against the build).
const (
	calcComponent = "../../plugin/testdata/calc/calc.wasm"
	randComponent = "../../plugin/testdata/rand/rand.wasm"
)

func componentEngine(t testing.TB) *Engine {
	t.Helper()
	e, err := NewEngine(EngineConfig{PoolSlots: 16, ComponentSlots: 8, MaxMemory: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the epoch ticker that deadlines need
		defer close(done)
		tk := time.NewTicker(time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				e.IncrementEpoch()
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return e
}

func loadComponent(t testing.TB, e *Engine, path string, viaCache bool) *Component {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := e.CompileComponent(b)
	if err != nil {
		t.Fatal(err)
	}
	if viaCache {
		art, err := c.Serialize()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if c, err = e.DeserializeComponent(art); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.Close)
	return c
}

func u32(v uint32) Val { return Val{Kind: KindU32, Uint: uint64(v)} }

// instance is a fresh instance of c, linked by a linker that defines
// nothing, both closed when the test ends.
func instance(t testing.TB, e *Engine, c *Component) *Instance {
	t.Helper()
	l, err := e.NewLinker(false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	in, err := l.Instantiate(c, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Close)
	return in
}

func TestComponentCallsThroughTheCache(t *testing.T) {
	e := componentEngine(t)
	c := loadComponent(t, e, calcComponent, true)
	if got := c.Imports(); len(got) != 0 {
		t.Fatalf("imports %v", got)
	}
	in := instance(t, e, c)
	add, _ := c.Func("add")
	if got := add.Type.Params[1].Name + " " + add.Type.Params[1].Type.String() + " -> " + add.Type.Result.String(); got != "b u32 -> u32" {
		t.Fatalf("add type %q", got)
	}
	r, err := in.Call(context.Background(), add, []Val{u32(40), u32(2)}, CallSpec{Fuel: 10000})
	if err != nil || r.End != CallOK || r.Result.Uint != 42 || r.FuelUsed == 0 {
		t.Fatalf("add: %+v %v", r, err)
	}
	greet, _ := c.Func("greet")
	r, err = in.Call(context.Background(), greet, []Val{{Kind: KindString, Str: "wovyr"}}, CallSpec{})
	if err != nil || r.End != CallOK || r.Result.Str != "hello, wovyr" {
		t.Fatalf("greet: %+v %v", r, err)
	}
	divide, _ := c.Func("divide")
	r, err = in.Call(context.Background(), divide, []Val{{Kind: KindS32, Int: 7}, {Kind: KindS32, Int: 0}}, CallSpec{})
	if err != nil || r.End != CallOK || r.Result.Ok || r.Result.Payload.Str != "division by zero" {
		t.Fatalf("divide: %+v %v", r, err)
	}
	if got := divide.Type.Result.String(); got != "result<s32, string>" {
		t.Fatalf("divide type %q", got)
	}
	// A result larger than the instance's call buffer, between calls of
	// another function (the instance keeps the last one it looked up).
	long := strings.Repeat("w", 1000)
	for range 2 {
		if r, err = in.Call(context.Background(), greet, []Val{{Kind: KindString, Str: long}}, CallSpec{}); err != nil || r.Result.Str != "hello, "+long {
			t.Fatalf("greet(1000 w): %d bytes, %v", len(r.Result.Str), err)
		}
		if r, err = in.Call(context.Background(), add, []Val{u32(1), u32(2)}, CallSpec{}); err != nil || r.Result.Uint != 3 {
			t.Fatalf("add after greet: %+v %v", r, err)
		}
	}
}

func TestTrapPoisonsTheInstance(t *testing.T) {
	e := componentEngine(t)
	c := loadComponent(t, e, calcComponent, false)
	l, _ := e.NewLinker(false)
	defer l.Close()
	in, err := l.Instantiate(c, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	counter, _ := c.Func("counter")
	crash, _ := c.Func("crash")
	for want := uint64(1); want <= 2; want++ {
		if r, err := in.Call(context.Background(), counter, nil, CallSpec{}); err != nil || r.Result.Uint != want {
			t.Fatalf("counter: %+v %v", r, err)
		}
	}
	r, err := in.Call(context.Background(), crash, nil, CallSpec{})
	if err != nil || r.End != CallTrap || !in.Poisoned() {
		t.Fatalf("crash: %+v %v", r, err)
	}
	if _, err := in.Call(context.Background(), counter, nil, CallSpec{}); err != ErrPoisoned {
		t.Fatalf("after a trap: %v, want ErrPoisoned", err)
	}
	fresh, err := l.Instantiate(c, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if r, err := fresh.Call(context.Background(), counter, nil, CallSpec{}); err != nil || r.Result.Uint != 1 {
		t.Fatalf("fresh counter: %+v %v", r, err)
	}
}

func TestComponentFuelDeadlineAndMemory(t *testing.T) {
	e := componentEngine(t)
	c := loadComponent(t, e, calcComponent, false)
	l, _ := e.NewLinker(false)
	defer l.Close()
	spin, _ := c.Func("spin")
	grow, _ := c.Func("grow")
	call := func(f *Export, args []Val, s CallSpec, lim Limits) *CallResult {
		t.Helper()
		in, err := l.Instantiate(c, lim)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		r, err := in.Call(context.Background(), f, args, s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	u64 := func(v uint64) []Val { return []Val{{Kind: KindU64, Uint: v}} }
	if r := call(spin, u64(1000), CallSpec{Fuel: 1_000_000}, Limits{}); r.End != CallOK || r.Result.Uint != 1000 {
		t.Fatalf("spin 1000 (control): %+v", r)
	}
	if r := call(spin, u64(0), CallSpec{Fuel: 100_000}, Limits{}); r.End != CallOutOfFuel || r.FuelUsed != 100_000 {
		t.Fatalf("spin forever, metered: %+v", r)
	}
	if r := call(spin, u64(0), CallSpec{Wall: 20 * time.Millisecond}, Limits{}); r.End != CallTimeout {
		t.Fatalf("spin forever, deadline: %+v", r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	in, _ := l.Instantiate(c, Limits{})
	r, err := in.Call(ctx, spin, u64(0), CallSpec{})
	in.Close()
	if err != nil || r.End != CallCancelled {
		t.Fatalf("spin forever, cancelled: %+v %v", r, err)
	}
	// The store limit refuses growth past 1 MiB (memory.grow returns -1);
	// the control grows within it.
	if r := call(grow, []Val{u32(2)}, CallSpec{}, Limits{Memory: 1 << 20}); r.Result.Int < 0 {
		t.Fatalf("grow 2 pages (control): %+v", r)
	}
	if r := call(grow, []Val{u32(32)}, CallSpec{}, Limits{Memory: 1 << 20}); r.End != CallOK || r.Result.Int != -1 {
		t.Fatalf("grow past the limit: %+v", r)
	}
}

func TestImportsAreListedAndNeedALinker(t *testing.T) {
	e := componentEngine(t)
	c := loadComponent(t, e, randComponent, false)
	if got, want := c.Imports(), []string{"wasi:random/random@0.2.0"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("imports %v, want %v", got, want)
	}
	bare, _ := e.NewLinker(false)
	defer bare.Close()
	if _, err := bare.Instantiate(c, Limits{}); err == nil {
		t.Fatal("instantiated without its import")
	}
	l, err := e.NewLinker(true)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	in, err := l.Instantiate(c, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	roll, _ := c.Func("roll")
	a, err1 := in.Call(context.Background(), roll, nil, CallSpec{})
	b, err2 := in.Call(context.Background(), roll, nil, CallSpec{})
	if err1 != nil || err2 != nil || a.End != CallOK || b.End != CallOK || a.Result.Uint == b.Result.Uint {
		t.Fatalf("roll: %+v %+v %v %v", a, b, err1, err2)
	}
}

func TestCoreModuleIsNotAComponent(t *testing.T) {
	e := componentEngine(t)
	_, err := e.CompileComponent([]byte(tinyWasm))
	if err == nil || err.Error() != "not a WebAssembly component: it is a core module (wrap it with `jco new` or `wasm-tools component new`)" {
		t.Fatalf("%v", err)
	}
}

// TestCodecRoundTripsThroughWasmtime passes one value of every kind through
// Wasmtime's value representation and back.
func TestCodecRoundTripsThroughWasmtime(t *testing.T) {
	some := Val{Kind: KindU8, Uint: 7}
	vals := []Val{
		{Kind: KindBool, Bool: true}, {Kind: KindS8, Int: -5}, {Kind: KindU8, Uint: 250},
		{Kind: KindS16, Int: -30000}, {Kind: KindU16, Uint: 65000}, {Kind: KindS32, Int: -2e9},
		{Kind: KindU32, Uint: 4e9}, {Kind: KindS64, Int: -9e18}, {Kind: KindU64, Uint: 18e18},
		{Kind: KindF32, Float: 1.5}, {Kind: KindF64, Float: -2.25}, {Kind: KindChar, Char: 'λ'},
		{Kind: KindString, Str: "héllo"}, {Kind: KindEnum, Str: "green"},
		{Kind: KindList, Elems: []Val{u32(1), u32(2)}}, {Kind: KindList, Elems: []Val{}},
		{Kind: KindTuple, Elems: []Val{u32(1), {Kind: KindString, Str: "x"}}},
		{Kind: KindRecord, Names: []string{"x", "y"}, Elems: []Val{u32(1), u32(2)}},
		{Kind: KindVariant, Str: "circle", Payload: &some}, {Kind: KindVariant, Str: "dot"},
		{Kind: KindOption, Payload: &some}, {Kind: KindOption},
		{Kind: KindResult, Ok: true, Payload: &some}, {Kind: KindResult},
		{Kind: KindFlags, Names: []string{"read", "exec"}}, {Kind: KindFlags, Names: []string{}},
	}
	got, err := roundTrip(vals)
	if err != nil {
		t.Fatal(err)
	}
	for i := range vals {
		want, _ := decodeVal(encodeVal(nil, &vals[i], nil), nil) // the decoder's normal form
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("%s: got %+v, want %+v", vals[i].Kind, got[i], want)
		}
	}
}

// TestQuickCodeRunsOnTheEngine: a component compiled by a QuickCompile
// engine deserializes on an engine of the same config without it, and
// runs there (what a plugin host's first load of a large component does).
func TestQuickCodeRunsOnTheEngine(t *testing.T) {
	b, err := os.ReadFile(calcComponent)
	if err != nil {
		t.Fatal(err)
	}
	cfg := EngineConfig{PoolSlots: 16, ComponentSlots: 8, MaxMemory: 16 << 20}
	qcfg := cfg
	qcfg.QuickCompile, qcfg.PoolSlots, qcfg.ComponentSlots = true, 1, 1
	if qcfg.CodeHash() != cfg.CodeHash() || qcfg.Hash() == cfg.Hash() {
		t.Fatal("QuickCompile must leave CodeHash alone and change Hash")
	}
	q, err := NewEngine(qcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	qc, err := q.CompileComponent(b)
	if err != nil {
		t.Fatal(err)
	}
	art, err := qc.Serialize()
	qc.Close()
	if err != nil {
		t.Fatal(err)
	}
	e := componentEngine(t)
	c, err := e.DeserializeComponent(art)
	if err != nil {
		t.Fatalf("the engine refuses quick code: %v", err)
	}
	t.Cleanup(c.Close)
	add, _ := c.Func("add")
	r, err := instance(t, e, c).Call(context.Background(), add, []Val{u32(40), u32(2)}, CallSpec{Fuel: 1e6})
	if err != nil || r.End != CallOK || r.Result.Uint != 42 {
		t.Fatalf("add on quick code: %+v %v", r, err)
	}
}
