package server_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/plugin"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/server"
)

var pluginKey = ed25519.NewKeyFromSeed([]byte("wovyr server plugin test key 32b"))

// pluginHarness is a daemon with a plugin host on dir that trusts
// pluginKey as "ops".
func pluginHarness(t testing.TB, dir string) *harness {
	h, _ := pluginHarnessHost(t, dir)
	return h
}

// pluginHarnessHost is pluginHarness with its plugin host.
func pluginHarnessHost(t testing.TB, dir string) (*harness, *plugin.Host) {
	t.Helper()
	ts, err := plugin.NewTrustStore(map[string]ed25519.PublicKey{"ops": pluginKey.Public().(ed25519.PublicKey)})
	if err != nil {
		t.Fatal(err)
	}
	host, err := plugin.NewHost(plugin.Config{Dir: filepath.Join(dir, "plugins"), Trust: ts})
	if err != nil {
		t.Fatal(err)
	}
	h := startHarness(t, testConfig(), dir, nil, func(o *server.Options) { o.Plugins = host })
	t.Cleanup(host.Close) // after the daemon stops (cleanups run last first)
	h.waitReady()
	return h, host
}

func testComponent(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "plugin", "testdata", name, name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func manifestFor(t testing.TB, name string, wasm []byte, sign bool, caps ...string) []byte {
	t.Helper()
	m := &plugin.Manifest{Name: name, Component: plugin.Digest(wasm), Trust: sandbox.Internal, Capabilities: caps}
	if sign {
		plugin.Sign(m, "ops", pluginKey)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func wantAPIError(t *testing.T, err error, status int, code sandbox.Class, field, msg string) {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != status || ce.Code != code || ce.Field != field || msg != "" && ce.Message != msg {
		t.Fatalf("got %#v, want %d %s field %q %q", err, status, code, field, msg)
	}
}

func TestPluginsEndToEnd(t *testing.T) {
	dir := stateDir(t)
	h := pluginHarness(t, dir)
	ctx := context.Background()
	ops, alice := h.client(opsToken), h.client(aliceToken)
	calc, rand := testComponent(t, "calc"), testComponent(t, "rand")

	_, err := alice.InstallPlugin(ctx, manifestFor(t, "calc", calc, true), calc)
	wantAPIError(t, err, http.StatusForbidden, server.Forbidden, "", "")
	_, err = ops.InstallPlugin(ctx, manifestFor(t, "calc", calc, false), calc)
	wantAPIError(t, err, http.StatusBadRequest, sandbox.BadInput, "manifest.signature",
		"bad-input (manifest.signature): internal plugins need a manifest signed by a key in the operator's trust store: the manifest is not signed")
	_, err = ops.InstallPlugin(ctx, manifestFor(t, "rand", rand, true), rand)
	wantAPIError(t, err, http.StatusBadRequest, sandbox.BadInput, "manifest.capabilities",
		"bad-input (manifest.capabilities): the component imports wasi:random/random@0.2.0: its manifest does not grant it")
	p, err := ops.InstallPlugin(ctx, manifestFor(t, "calc", calc, true), calc)
	if err != nil || p.Name != "calc" || p.SignedBy != "ops" || len(p.Functions) != 15 {
		t.Fatalf("install: %+v %v", p, err)
	}
	if _, err := ops.InstallPlugin(ctx, manifestFor(t, "rand", rand, true, "wasi:random/random"), rand); err != nil {
		t.Fatal(err)
	}

	list, err := alice.Plugins(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "calc" || list[1].Imports[0] != "wasi:random/random@0.2.0" {
		t.Fatalf("list: %+v %v", list, err)
	}
	r, err := alice.CallPlugin(ctx, "calc", "add", json.RawMessage(`{"a": 40, "b": 2}`))
	if err != nil || string(r.Value) != "42" || r.End != "ok" {
		t.Fatalf("add: %+v %v", r, err)
	}
	_, err = alice.CallPlugin(ctx, "calc", "add", json.RawMessage(`{"a": 40, "b": "2"}`))
	wantAPIError(t, err, http.StatusBadRequest, sandbox.BadInput, "args.b", `bad-input (args.b): expected u32, got "2"`)
	if r, err = alice.CallPlugin(ctx, "calc", "crash", nil); err != nil || r.End != "trap" || string(r.Value) != "null" {
		t.Fatalf("crash: %+v %v", r, err)
	}
	if r, err = alice.CallPlugin(ctx, "calc", "divide", json.RawMessage(`[1, 0]`)); err != nil || string(r.Value) != `{"err":"division by zero"}` {
		t.Fatalf("divide: %+v %v", r, err)
	}
	_, err = alice.CallPlugin(ctx, "nope", "add", nil)
	wantAPIError(t, err, http.StatusNotFound, server.NotFound, "", `not-found: no plugin "nope"`)
	_, err = alice.CallPluginWith(ctx, "calc", client.PluginCall{Function: "add", Args: json.RawMessage(`[1, 2]`),
		Network: netpolicy.Policy{Allow: []netpolicy.Rule{{Host: "example.com", Ports: []uint16{443}}}}})
	wantAPIError(t, err, http.StatusBadRequest, sandbox.BadInput, "network",
		`bad-input (network): plugin calc does not import wovyr:host/http, so a network policy has nothing to govern`)

	// A restart installs them again from the store (and the sealed cache).
	h.stop()
	h = pluginHarness(t, dir)
	alice, ops = h.client(aliceToken), h.client(opsToken)
	if r, err = alice.CallPlugin(ctx, "rand", "roll", nil); err != nil || r.End != "ok" {
		t.Fatalf("roll after a restart: %+v %v", r, err)
	}
	if _, err := ops.RemovePlugin(ctx, "calc"); err != nil {
		t.Fatal(err)
	}
	_, err = alice.CallPlugin(ctx, "calc", "add", json.RawMessage(`[1, 2]`))
	wantAPIError(t, err, http.StatusNotFound, server.NotFound, "", `not-found: no plugin "calc"`)
	if list, _ := alice.Plugins(ctx); len(list) != 1 {
		t.Fatalf("after rm: %+v", list)
	}
}

// TestPluginResourcesOverHTTP: a resource a call returns is a handle the
// tenant's later calls pass back; another tenant's call with that handle
// is bad-input, exactly as a made-up one.
func TestPluginResourcesOverHTTP(t *testing.T) {
	h := pluginHarness(t, stateDir(t))
	ctx := context.Background()
	alice, bob := h.client(aliceToken), h.client(bobToken)
	tally := testComponent(t, "tally")
	p, err := h.client(opsToken).InstallPlugin(ctx, manifestFor(t, "tally", tally, true), tally)
	if err != nil {
		t.Fatal(err)
	}
	sigs := map[string]string{}
	for _, f := range p.Functions {
		sigs[f.Name] = f.Signature
	}
	const iface = "wovyr:test/counters#"
	if sigs[iface+"[constructor]counter"] != "func(start: u32) -> counter" ||
		sigs[iface+"[resource-drop]counter"] != "func(self: counter)" || sigs[iface+"total"] != "func(cs: list<borrow<counter>>) -> u64" {
		t.Fatalf("functions: %v", sigs)
	}
	r, err := alice.CallPlugin(ctx, "tally", iface+"[constructor]counter", json.RawMessage(`{"start": 40}`))
	if err != nil || r.End != "ok" {
		t.Fatalf("constructor: %+v %v", r, err)
	}
	var c struct {
		Resource string `json:"resource"`
		Handle   uint64 `json:"handle"`
	}
	if err := json.Unmarshal(r.Value, &c); err != nil || c.Resource != "counter" {
		t.Fatalf("constructor returned %s", r.Value)
	}
	self := json.RawMessage(`{"self": ` + string(r.Value) + `, "by": 2}`)
	if r, err = alice.CallPlugin(ctx, "tally", iface+"[method]counter.incr", self); err != nil || string(r.Value) != "42" {
		t.Fatalf("incr: %+v %v", r, err)
	}
	want := fmt.Sprintf("bad-input (args.self): no resource with handle %d is held for tenant bob (dropped, taken by a call, or closed with its instance after a failed call or 10m0s idle)", c.Handle)
	_, err = bob.CallPlugin(ctx, "tally", iface+"[method]counter.incr", self)
	wantAPIError(t, err, http.StatusBadRequest, sandbox.BadInput, "args.self", want)
	if r, err = alice.CallPlugin(ctx, "tally", iface+"finish", json.RawMessage(`{"c": {"handle": `+fmt.Sprint(c.Handle)+`}}`)); err != nil || string(r.Value) != "42" {
		t.Fatalf("finish: %+v %v", r, err)
	}
	_, err = alice.CallPlugin(ctx, "tally", iface+"[method]counter.incr", self)
	wantAPIError(t, err, http.StatusBadRequest, sandbox.BadInput, "args.self", "")
}

func TestPluginsNeedAHost(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	list, err := h.client(aliceToken).Plugins(context.Background())
	if err != nil || len(list) != 0 {
		t.Fatalf("list: %+v %v", list, err)
	}
	_, err = h.client(aliceToken).CallPlugin(context.Background(), "calc", "add", nil)
	wantAPIError(t, err, http.StatusServiceUnavailable, server.Unavailable, "", "unavailable: this daemon hosts no plugins")
}
