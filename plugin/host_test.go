package plugin

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

func component(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name, name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// opsKey is the test operator's signing key (a fixed seed: tests must not
// depend on randomness).
var opsKey = ed25519.NewKeyFromSeed([]byte("wovyr plugin test signing key 32"))

func newHost(t testing.TB, cfg Config) *Host {
	t.Helper()
	if cfg.Trust == nil {
		ts, err := NewTrustStore(map[string]ed25519.PublicKey{"ops": opsKey.Public().(ed25519.PublicKey)})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Trust = ts
	}
	h, err := NewHost(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// signed is a manifest for the component, signed by opsKey.
func signed(name string, wasm []byte, caps ...string) *Manifest {
	m := &Manifest{Name: name, Component: Digest(wasm), Trust: sandbox.Internal, Capabilities: caps}
	Sign(m, "ops", opsKey)
	return m
}

// awaitOptimized waits, two minutes at most, for plugin name's optimized
// code (tier.go) to be swapped in.
func awaitOptimized(t testing.TB, h *Host, name string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if i := slices.IndexFunc(h.List(), func(in Info) bool { return in.Name == name }); i >= 0 && h.List()[i].Code == "optimized" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("plugin %s's optimized code never came in", name)
		}
	}
}

func call(t testing.TB, h *Host, tenant, name, fn, args string) *Result {
	t.Helper()
	r, err := h.Call(context.Background(), tenant, name, fn, json.RawMessage(args), CallOptions{})
	if err != nil {
		t.Fatalf("%s(%s): %v", fn, args, err)
	}
	return r
}

// TestUnfinishedArtifactsRemovedAtStart: a compiled component's temporary
// file that a crash left in Dir is gone when a host starts there; the
// sealed artifact beside it still loads without a compile.
func TestUnfinishedArtifactsRemovedAtStart(t *testing.T) {
	dir := t.TempDir()
	calc := component(t, "calc")
	first := newHost(t, Config{Dir: dir})
	if _, err := first.Load(signed("calc", calc), calc); err != nil {
		t.Fatal(err)
	}
	first.Close()
	stale := filepath.Join(dir, ".wovyr-tmp-4242")
	if err := os.WriteFile(stale, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHost(t, Config{Dir: dir})
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the unfinished file: %v", err)
	}
	if _, err := h.Load(signed("calc", calc), calc); err != nil || h.quickCompiles.Load()+h.fullCompiles.Load() != 0 {
		t.Fatalf("the sealed artifact: %v, %d compiles", err, h.fullCompiles.Load())
	}
}

func TestCallsMapEveryTypeFamily(t *testing.T) {
	h := newHost(t, Config{Dir: t.TempDir()})
	calc := component(t, "calc")
	if _, err := h.Load(signed("calc", calc), calc); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ fn, args, want string }{
		{"add", `{"a": 40, "b": 2}`, `42`},
		{"add", `[4294967295, 1]`, `0`},
		{"greet", `{"name": "wövyr"}`, `"hello, wövyr"`},
		{"greet", `{"name": "` + strings.Repeat("w", 600) + `"}`, `"hello, ` + strings.Repeat("w", 600) + `"`}, // beyond the call buffer
		{"sum", `{"xs": [1, 2, 4294967295]}`, `4294967298`},
		{"swap", `{"p": {"x": 1, "y": -2}}`, `{"x":-2,"y":1}`},
		{"area", `{"s": {"tag": "circle", "val": 2}}`, `12`},
		{"area", `{"s": {"tag": "dot"}}`, `0`},
		{"divide", `{"a": 7, "b": 2}`, `{"ok":3}`},
		{"divide", `{"a": 7, "b": 0}`, `{"err":"division by zero"}`},
		{"find", `{"xs": [5, 6, 7], "x": 7}`, `2`},
		{"find", `{"xs": [], "x": 7}`, `null`},
		{"next-color", `{"c": "blue"}`, `"red"`},
		{"flip", `{"p": ["write"]}`, `["read","exec"]`},
		{"half", `{"x": 3}`, `1.5`},
		{"half", `{"x": "inf"}`, `"inf"`},
		{"upper", `{"c": "q"}`, `"Q"`},
		{"crash", `{}`, `null`},
	} {
		r := call(t, h, "t1", "calc", c.fn, c.args)
		wantEnd := "ok"
		if c.fn == "crash" {
			wantEnd = "trap"
		}
		if string(r.Value) != c.want || r.End != wantEnd {
			t.Errorf("%s(%s) = %s (%s %s), want %s", c.fn, c.args, r.Value, r.End, r.Error, c.want)
		}
	}
	info := h.List()
	if len(info) != 1 || info[0].SignedBy != "ops" || len(info[0].Functions) != 15 {
		t.Fatalf("list: %+v", info)
	}
	if got := info[0].Functions[0]; got != (Function{"add", "func(a: u32, b: u32) -> u32"}) {
		t.Fatalf("first function %+v", got)
	}
}

func TestBadArgumentsRunNothing(t *testing.T) {
	h := newHost(t, Config{})
	calc := component(t, "calc")
	h.Load(signed("calc", calc), calc)
	call(t, h, "t1", "calc", "counter", `{}`) // 1 on this tenant's instance
	for _, c := range []struct{ fn, args, field, want string }{
		{"add", `{"a": 1, "b": "two"}`, "args.b", `bad-input (args.b): expected u32, got "two"`},
		{"swap", `{"p": {"x": 1}}`, "args.p.y", `bad-input (args.p.y): missing field y: expected s32`},
		{"nope", `{}`, "func", `bad-input (func): plugin calc exports no function "nope" (it exports add, area, counter, crash, divide, find, flip, greet, grow, half, next-color, spin, sum, swap, upper)`},
	} {
		_, err := h.Call(context.Background(), "t1", "calc", c.fn, json.RawMessage(c.args), CallOptions{})
		if err == nil || err.Error() != c.want || sandbox.FieldOf(err) != c.field {
			t.Errorf("%s: %v, want %s", c.fn, err, c.want)
		}
	}
	// The refused calls never reached the instance: the counter goes on.
	if r := call(t, h, "t1", "calc", "counter", `{}`); string(r.Value) != "2" || r.Fresh {
		t.Fatalf("counter after refused calls: %+v", r)
	}
	if _, err := h.Call(context.Background(), "t1", "nosuch", "add", nil, CallOptions{}); sandbox.ClassOf(err) != sandbox.NotFound {
		t.Fatalf("unknown plugin: %v", err)
	}
}

// TestPoisonedInstanceIsNeverReused: a trap discards the instance; the
// next call gets a fresh one (its counter starts again), and tenants never
// share one. The positive control is the counter that goes on counting on
// a healthy instance.
func TestPoisonedInstanceIsNeverReused(t *testing.T) {
	h := newHost(t, Config{})
	calc := component(t, "calc")
	h.Load(signed("calc", calc), calc)
	for _, want := range []string{"1", "2", "3"} { // control: one instance, kept
		if r := call(t, h, "a", "calc", "counter", `{}`); string(r.Value) != want {
			t.Fatalf("counter = %s, want %s", r.Value, want)
		}
	}
	if r := call(t, h, "b", "calc", "counter", `{}`); string(r.Value) != "1" || !r.Fresh {
		t.Fatalf("another tenant's first call: %+v", r)
	}
	if r := call(t, h, "a", "calc", "crash", `{}`); r.End != "trap" || !strings.Contains(r.Error, "unreachable") {
		t.Fatalf("crash: %+v", r)
	}
	if r := call(t, h, "a", "calc", "counter", `{}`); string(r.Value) != "1" || !r.Fresh {
		t.Fatalf("after the trap: %+v", r)
	}
}

func TestLimitsEndCallsTyped(t *testing.T) {
	h := newHost(t, Config{Limits: Limits{Fuel: 1e6, Memory: 1 << 20, WallMS: 50}})
	calc := component(t, "calc")
	if _, err := h.Load(signed("calc", calc), calc); err != nil {
		t.Fatal(err)
	}
	if r := call(t, h, "t", "calc", "spin", `{"n": 1000}`); r.End != "ok" || string(r.Value) != "1000" {
		t.Fatalf("spin 1000 (control): %+v", r)
	}
	if r := call(t, h, "t", "calc", "spin", `{"n": 0}`); r.End != "out-of-fuel" || r.FuelUsed != 1e6 || r.Error != "fuel exhausted after 1000000 units" {
		t.Fatalf("spin forever: %+v", r)
	}
	if r := call(t, h, "t", "calc", "grow", `{"pages": 2}`); string(r.Value) == "-1" {
		t.Fatalf("grow within the limit (control): %+v", r)
	}
	if r := call(t, h, "t", "calc", "grow", `{"pages": 64}`); string(r.Value) != "-1" {
		t.Fatalf("grow past 1 MiB: %+v", r)
	}
	// A manifest may lower the host's limits, never raise them.
	m := signed("calc", calc)
	m.Limits = Limits{WallMS: 20, Fuel: 0}
	if _, err := h.Load(m, calc); err != nil {
		t.Fatal(err)
	}
	h2 := newHost(t, Config{Limits: Limits{WallMS: 30}})
	h2.Load(signed("calc", calc), calc)
	if r := call(t, h2, "t", "calc", "spin", `{"n": 0}`); r.End != "out-of-fuel" && r.End != "timeout" {
		t.Fatalf("spin forever under a deadline: %+v", r)
	}
	m.Limits = Limits{Fuel: 2e9}
	if _, err := h.Load(m, calc); err == nil || err.Error() != "bad-input (manifest.limits.fuel): 2000000000 exceeds this host's limit of 1000000" {
		t.Fatalf("raised fuel: %v", err)
	}
}

func TestUngrantedImportIsRefusedAtLoad(t *testing.T) {
	h := newHost(t, Config{})
	rand := component(t, "rand")
	_, err := h.Load(signed("rand", rand), rand)
	if err == nil || err.Error() != "bad-input (manifest.capabilities): the component imports wasi:random/random@0.2.0: its manifest does not grant it" || !errors.Is(err, ErrUngranted) {
		t.Fatalf("ungranted: %v", err)
	}
	if len(h.List()) != 0 {
		t.Fatal("a refused plugin was installed")
	}
	// Positive control: granted, it loads and its import works.
	for _, grant := range []string{"wasi:random/random", "wasi:random/random@0.2.0"} {
		if _, err := h.Load(signed("rand", rand, grant), rand); err != nil {
			t.Fatalf("granted %s: %v", grant, err)
		}
		a, b := call(t, h, "t", "rand", "roll", `{}`), call(t, h, "t", "rand", "roll", `{}`)
		if a.End != "ok" || b.End != "ok" || string(a.Value) == string(b.Value) {
			t.Fatalf("roll: %+v %+v", a, b)
		}
	}
	// A grant of another version does not cover it.
	if _, err := h.Load(signed("rand", rand, "wasi:random/random@0.2.9"), rand); !errors.Is(err, ErrUngranted) {
		t.Fatalf("other version: %v", err)
	}
}

func TestManifestRefusals(t *testing.T) {
	calc := component(t, "calc")
	for _, c := range []struct{ manifest, want string }{
		{`{"name": "Calc", "component": "sha256:00", "trust": "internal"}`, `bad-input (manifest.name): plugin name "Calc" must be 1-63 of a-z, 0-9 and '-', starting with a letter`},
		{`{"name": "calc", "component": "md5:00", "trust": "internal"}`, `bad-input (manifest.component): component digest "md5:00" must be sha256:<64 hex digits>`},
		{`{"name": "calc", "component": "` + Digest(calc) + `"}`, `bad-input (manifest.trust): a manifest must name its trust class (trusted, internal, untrusted, hostile)`},
		{`{"name": "calc", "component": "` + Digest(calc) + `", "trust": "internal", "capabilities": ["wasi:sockets/tcp"]}`, `bad-input (manifest.capabilities[0]): wasi:sockets/tcp is not offered: plugins get no raw sockets (wovyr:host/http is their outgoing HTTP, through the egress policy)`},
		{`{"name": "calc", "component": "` + Digest(calc) + `", "trust": "internal", "capabilities": ["acme:db/query"]}`, `bad-input (manifest.capabilities[0]): acme:db/query is not an interface wovyr offers to plugins`},
		{`{"name": "calc", "component": "` + Digest(calc) + `", "trust": "internal", "grants": []}`, `bad-input (manifest): not a valid manifest: json: unknown field "grants"`},
	} {
		_, err := ParseManifest([]byte(c.manifest))
		if err == nil || err.Error() != c.want {
			t.Errorf("%s:\n got %v\nwant %s", c.manifest, err, c.want)
		}
	}
	h := newHost(t, Config{})
	m := signed("calc", calc)
	if _, err := h.Load(m, component(t, "rand")); err == nil || !strings.HasPrefix(err.Error(), "bad-input (manifest.component): the component's digest is sha256:") {
		t.Fatalf("wrong bytes: %v", err)
	}
}

func TestTrustNeedsAValidSignature(t *testing.T) {
	calc := component(t, "calc")
	other := ed25519.NewKeyFromSeed([]byte("not the operator's key, 32 bytes"))
	unsigned := func(trust sandbox.TrustClass) *Manifest {
		return &Manifest{Name: "calc", Component: Digest(calc), Trust: trust}
	}
	tampered := signed("calc", calc)
	tampered.Capabilities = []string{"wasi:random/random"} // added after signing
	byOther := unsigned(sandbox.Internal)
	Sign(byOther, "ops", other)
	unknown := unsigned(sandbox.Internal)
	Sign(unknown, "someone", other)
	badUntrusted := unsigned(sandbox.Untrusted)
	Sign(badUntrusted, "ops", other)
	for _, c := range []struct {
		name  string
		m     *Manifest
		floor bool // lower untrusted's floor to wasm (an operator override)
		is    error
		want  string
	}{
		{"good", signed("calc", calc), false, nil, ""},
		{"missing", unsigned(sandbox.Internal), false, ErrUnsigned, "bad-input (manifest.signature): internal plugins need a manifest signed by a key in the operator's trust store: the manifest is not signed"},
		{"trusted missing", unsigned(sandbox.Trusted), false, ErrUnsigned, "bad-input (manifest.signature): trusted plugins need a manifest signed by a key in the operator's trust store: the manifest is not signed"},
		{"tampered", tampered, false, ErrBadSignature, `bad-input (manifest.signature): the manifest's signature is not valid: the signature does not verify (key "ops")`},
		{"wrong key", byOther, false, ErrBadSignature, `bad-input (manifest.signature): the manifest's signature is not valid: the signature does not verify (key "ops")`},
		{"unknown key", unknown, false, ErrUnknownKey, `bad-input (manifest.signature): the manifest's signature is not valid: its signing key is not in the trust store (key "someone")`},
		{"untrusted floor", unsigned(sandbox.Untrusted), false, sandbox.FloorUnmet, "floor-unmet (manifest.trust): untrusted plugins need gvisor strength or above; this node hosts plugins in-process at wasm strength"},
		{"untrusted unsigned, floor lowered", unsigned(sandbox.Untrusted), true, nil, ""},
		{"untrusted with a bad signature", badUntrusted, true, ErrBadSignature, `bad-input (manifest.signature): the manifest's signature is not valid: the signature does not verify (key "ops")`},
	} {
		cfg := Config{}
		if c.floor {
			f, err := sandbox.Floors{}.WithFloor(sandbox.Untrusted, sandbox.Wasm, true)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Floors = f
		}
		h := newHost(t, cfg)
		_, err := h.Load(c.m, calc)
		if c.is == nil && err != nil || c.is != nil && (!errors.Is(err, c.is) || err.Error() != c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// TestCacheSurvivesARestart: a second host on the same directory loads
// the sealed artifact instead of compiling, and a corrupt one is
// recompiled.
func TestCacheSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	calc := component(t, "calc")
	h := newHost(t, Config{Dir: dir})
	if _, err := h.Load(signed("calc", calc), calc); err != nil {
		t.Fatal(err)
	}
	h.Close()
	arts, _ := filepath.Glob(filepath.Join(dir, "*.cwasm"))
	if len(arts) != 1 {
		t.Fatalf("artifacts %v", arts)
	}
	for _, corrupt := range []bool{false, true} {
		if corrupt {
			b, _ := os.ReadFile(arts[0])
			b[len(b)-1] ^= 0xff
			os.WriteFile(arts[0], b, 0o600)
		}
		h := newHost(t, Config{Dir: dir})
		if _, err := h.Load(signed("calc", calc), calc); err != nil {
			t.Fatal(err)
		}
		if r := call(t, h, "t", "calc", "add", `[1, 2]`); string(r.Value) != "3" {
			t.Fatalf("corrupt=%v: %+v", corrupt, r)
		}
	}
	if got, _ := filepath.Glob(filepath.Join(dir, "*.cwasm")); !reflect.DeepEqual(got, arts) {
		t.Fatalf("artifacts after recompiling %v", got)
	}
}
