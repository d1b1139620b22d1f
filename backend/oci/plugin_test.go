package oci

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/plugin"
	"github.com/wovyr/wovyr/plugin/plugintest"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
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
	sb, err := r.b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand, Egress: !inv.Policy.Network.DenyAll()})
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

// TestUntrustedPluginHostCapsInGVisor: an untrusted plugin granted
// wovyr:host/kv and wovyr:host/http, each call in a fresh gVisor sandbox,
// gets both without a way around the sandbox. kv: the tenant's data goes
// in with the call and its writes come back into the node's store, so it
// lasts across calls (each a new sandbox) and stays the tenant's own.
// http: a call with a policy runs in a sandbox whose netstack sits in an
// egress slot bound to it, and the runner's requests go to that slot's
// proxy, which answers them exactly as it answers the in-process host
// (TestFetchThroughEgress): the allowed name over http and https (the
// rig's CA shipped), every other name, a metadata address by an allowed
// name and an IP literal denied; a call without a policy gets a sandbox
// without a network and every request denied. No slot is left.
func TestUntrustedPluginHostCapsInGVisor(t *testing.T) {
	jco := plugintest.Jco(t)
	kvWasm, fetchWasm := plugintest.JS(t, jco, "kvdemo"), plugintest.JS(t, jco, "fetchdemo")
	r := newEgressRig(t, "opl")
	cfg := testConfig(t)
	cfg.Network = r.svc
	g, err := NewGVisor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(t.TempDir(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	run := &sandboxRunner{t: t, b: g}
	h, err := plugin.NewHost(plugin.Config{Dir: t.TempDir(), KV: st, Egress: r.svc, FetchRoots: r.rig.CAPEM, FetchMaxBody: 64 << 10,
		Isolated: run, IsolatedArgv: []string{RunnerPath, "component-exec"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for name, wasm := range map[string][]byte{"kvdemo": kvWasm, "fetchdemo": fetchWasm} {
		caps := []string{"wovyr:host/log", "wovyr:host/kv"}
		if name == "fetchdemo" {
			caps = []string{"wovyr:host/http"}
		}
		m := &plugin.Manifest{Name: name, Component: plugin.Digest(wasm), Trust: sandbox.Untrusted, Capabilities: caps,
			Limits: plugin.Limits{Fuel: 500_000_000, Memory: 32 << 20, WallMS: 10_000}}
		if info, err := h.Load(m, wasm); err != nil || !info.Isolated || info.Code != "optimized" {
			t.Fatalf("%s: %+v %v", name, info, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	call := func(tenant, name, fn, args string, opts plugin.CallOptions) string {
		t.Helper()
		res, err := h.Call(ctx, tenant, name, fn, json.RawMessage(args), opts)
		if err != nil || res.End != "ok" {
			t.Fatalf("%s(%s): %+v %v", fn, args, res, err)
		}
		return string(res.Value)
	}
	none := plugin.CallOptions{}
	for _, c := range []struct{ tenant, fn, args, want string }{
		{"alice", "remember", `["colour", "blue"]`, `{"ok":null}`},
		{"alice", "remember", `["colour", "red"]`, `{"ok":"blue"}`},
		{"bob", "recall", `["colour"]`, `{"ok":null}`},
		{"alice", "names", `[""]`, `{"ok":["colour"]}`},
	} {
		if got := call(c.tenant, "kvdemo", c.fn, c.args, none); got != c.want {
			t.Errorf("%s %s(%s) = %s, want %s", c.tenant, c.fn, c.args, got, c.want)
		}
	}
	if v, ok, err := st.KVGet("kvdemo", "alice", "colour"); err != nil || !ok || string(v) != "red" {
		t.Errorf("alice's colour in the store: %q %v %v", v, ok, err)
	}

	web := plugin.CallOptions{Network: netpolicy.Policy{Allow: []netpolicy.Rule{
		{Host: "allowed.test", Ports: []uint16{80, 443}}, {Host: "meta.test", Ports: []uint16{80}}}}}
	denied := func(target string) string {
		return `{"err":"denied: the call's network policy does not allow ` + target + `"}`
	}
	for _, c := range []struct {
		url  string
		opts plugin.CallOptions
		want string // a prefix
	}{
		{"http://allowed.test/", web, `{"ok":"200 http host=allowed.test sni= local=`},
		{"https://allowed.test/", web, `{"ok":"200 https host=allowed.test sni=allowed.test local=`},
		{"http://allowed.test/", none, denied("allowed.test")},
		{"https://other.test/", web, denied("other.test")},
		{"http://meta.test/", web, denied("meta.test")},
		{"http://169.254.169.254/", web, denied("169.254.169.254")},
		{"http://allowed.test/big", web, `{"err":"too-large: 65536"}`},
	} {
		if got := call("alice", "fetchdemo", "get", `["`+c.url+`"]`, c.opts); !strings.HasPrefix(got, c.want) {
			t.Errorf("get %s (policy %v) = %s, want %s…", c.url, c.opts.Network.Allow, got, c.want)
		}
	}
}
