package oci

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wovyr/wovyr/plugin"
	"github.com/wovyr/wovyr/sandbox"
)

// sandboxRunner runs each invocation in a fresh sandbox of b, as the
// manager does at an untrusted plugin's floor (gVisor).
type sandboxRunner struct {
	t    testing.TB
	b    *Backend
	runs atomic.Int32
}

func (r *sandboxRunner) Run(ctx context.Context, inv *sandbox.Invocation) (*sandbox.Result, error) {
	r.runs.Add(1)
	if got := sandbox.DefaultFloor(inv.Policy.Trust); got > r.b.Strength() {
		r.t.Errorf("a %s plugin's call came to %s, below its floor %s", inv.Policy.Trust, r.b.Name(), got)
	}
	sb, err := r.b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		return nil, err
	}
	res, err := sb.Run(ctx, inv)
	if derr := sb.Destroy(ctx); derr != nil {
		r.t.Error(derr)
	}
	assertNoLeftovers(r.t, r.b, sb.(*Sandbox))
	return res, err
}

// TestUntrustedPluginRunsInGVisor: an untrusted plugin is never
// instantiated in the daemon's process; each call runs `wovyr
// component-exec` in a fresh gVisor sandbox, with the same typed values,
// ends and limits as in-process (a trap, out of fuel), a granted WASI
// import, no state carried between calls, and arguments that do not match
// refused before any sandbox starts.
func TestUntrustedPluginRunsInGVisor(t *testing.T) {
	g, err := NewGVisor(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	if capa := g.Probe(context.Background()); !capa.Available {
		t.Fatalf("gvisor unavailable: %s", capa.Reason)
	}
	run := &sandboxRunner{t: t, b: g}
	h, err := plugin.NewHost(plugin.Config{Dir: t.TempDir(), Isolated: run, IsolatedArgv: []string{RunnerPath, "component-exec"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	read := func(name string) []byte {
		b, err := os.ReadFile("../../plugin/testdata/" + name + "/" + name + ".wasm")
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	calc, rand := read("calc"), read("rand")
	manifest := func(name string, wasm []byte, caps ...string) *plugin.Manifest {
		return &plugin.Manifest{Name: name, Component: plugin.Digest(wasm), Trust: sandbox.Untrusted, Capabilities: caps,
			Limits: plugin.Limits{Fuel: 5_000_000, Memory: 16 << 20, WallMS: 5000}}
	}
	if _, err := h.Load(manifest("calc", calc), calc); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Load(manifest("rand", rand), rand); !errors.Is(err, plugin.ErrUngranted) {
		t.Fatalf("rand without its grant: %v", err)
	}
	if _, err := h.Load(manifest("rand", rand, "wasi:random/random"), rand); err != nil {
		t.Fatal(err)
	}
	if n := run.runs.Load(); n != 0 {
		t.Fatalf("loading ran %d sandboxes", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	call := func(name, fn, args string) *plugin.Result {
		t.Helper()
		r, err := h.Call(ctx, "acme", name, fn, json.RawMessage(args), plugin.CallOptions{})
		if err != nil {
			t.Fatalf("%s(%s): %v", fn, args, err)
		}
		return r
	}
	for _, c := range []struct{ fn, args, end, value string }{
		{"add", `{"a": 40, "b": 2}`, "ok", `42`},
		{"greet", `["gVisor"]`, "ok", `"hello, gVisor"`},
		{"divide", `[1, 0]`, "ok", `{"err":"division by zero"}`},
		{"counter", ``, "ok", `1`},
		{"counter", ``, "ok", `1`}, // a fresh sandbox each call
		{"crash", ``, "trap", `null`},
		{"spin", `[0]`, "out-of-fuel", `null`},
	} {
		r := call("calc", c.fn, c.args)
		if r.End != c.end || string(r.Value) != c.value || !r.Fresh {
			t.Errorf("%s(%s) = %s %s (%s), want %s %s", c.fn, c.args, r.End, r.Value, r.Error, c.end, c.value)
		}
	}
	if r := call("rand", "roll", ``); r.End != "ok" || len(r.Value) < 1 {
		t.Errorf("roll: %+v", r)
	}
	before := run.runs.Load()
	_, err = h.Call(ctx, "acme", "calc", "add", json.RawMessage(`{"a": "x", "b": 1}`), plugin.CallOptions{})
	if sandbox.ClassOf(err) != sandbox.BadInput || run.runs.Load() != before {
		t.Fatalf("bad arguments: %v, %d sandboxes started", err, run.runs.Load()-before)
	}
}
