package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/plugin/plugintest"
	"github.com/wovyr/wovyr/sandbox"
)

// TestJSComponent: a JavaScript component built by `jco componentize`
// (StarlingMonkey, about 12 MB) loads — compiled quickly, then tiered up to
// optimized code in the background, then from the sealed cache by a second
// host — and its exports take and return typed values;
// a mismatched argument is bad-input with nothing run; a thrown error, a
// spin and a memory hog end the call (trap, out-of-fuel, trap) and the
// next call gets a fresh instance.
func TestJSComponent(t *testing.T) {
	wasm := plugintest.JS(t, plugintest.Jco(t), "jsdemo")
	dir := t.TempDir()
	m := signed("jsdemo", wasm)
	m.Limits = Limits{Fuel: 200_000_000, Memory: 32 << 20}
	Sign(m, "ops", opsKey)

	h := newHost(t, Config{Dir: dir})
	info, err := h.Load(m, wasm)
	if err != nil {
		t.Fatal(err)
	}
	if n := h.quickCompiles.Load(); n != 1 || info.Code != "quick" {
		t.Fatalf("compiled quickly %d times, code %q: want the quick compile first", n, info.Code)
	}
	if len(info.Imports) != 0 || len(info.Functions) != 8 {
		t.Fatalf("imports %v, functions %v", info.Imports, info.Functions)
	}
	calls := []struct{ fn, args, want string }{
		{"greet", `{"name": "wövyr"}`, `"hello, wövyr"`},
		{"add", `[4294967295, 3]`, `2`},
		{"summarize", `{"xs": [1, 2, 4.5]}`, `{"count":3,"mean":2.5}`},
		{"summarize", `{"xs": []}`, `{"count":0,"mean":0}`},
		{"parse", `{"s": "42"}`, `{"ok":42}`},
		{"parse", `{"s": "4x"}`, `{"err":"not a u32: \"4x\""}`},
		{"first", `{"xs": ["a", "b"]}`, `"a"`},
		{"first", `{"xs": []}`, `null`},
	}
	for _, c := range calls {
		if r := call(t, h, "alice", "jsdemo", c.fn, c.args); r.End != "ok" || string(r.Value) != c.want {
			t.Errorf("%s(%s) = %s (%s %s), want %s", c.fn, c.args, r.Value, r.End, r.Error, c.want)
		}
	}
	_, err = h.Call(context.Background(), "alice", "jsdemo", "add", json.RawMessage(`{"a": "x", "b": 1}`), CallOptions{})
	var se *sandbox.Error
	if !errors.As(err, &se) || se.Class != sandbox.BadInput || se.Field != "args.a" || !strings.Contains(se.Msg, "expected u32") {
		t.Fatalf("a string for a u32: %v", err)
	}
	for _, c := range []struct{ fn, args, end string }{
		{"boom", `{}`, "trap"},
		{"spin", `{}`, "out-of-fuel"},
		{"hog", `{"mib": 64}`, "trap"},
	} {
		if r := call(t, h, "alice", "jsdemo", c.fn, c.args); r.End != c.end {
			t.Errorf("%s: end %s (%s), want %s", c.fn, r.End, r.Error, c.end)
		}
		// The instance that failed is gone; the next call's is fresh.
		if r := call(t, h, "alice", "jsdemo", "add", `[1, 2]`); r.End != "ok" || string(r.Value) != "3" {
			t.Errorf("after %s: add = %s (%s %s)", c.fn, r.Value, r.End, r.Error)
		}
	}
	if r := call(t, h, "alice", "jsdemo", "hog", `{"mib": 8}`); r.End != "ok" || string(r.Value) != "8" {
		t.Errorf("hog(8) under 32 MiB: %s (%s %s)", r.Value, r.End, r.Error)
	}
	// Meanwhile the optimized code compiled: it is sealed, and swapped in
	// once the plugin is idle.
	awaitOptimized(t, h, "jsdemo")
	if q, f := h.quickCompiles.Load(), h.fullCompiles.Load(); q != 1 || f != 1 {
		t.Fatalf("compiled %d times quickly and %d fully, want the quick and the optimized compile", q, f)
	}
	for _, c := range calls {
		if r := call(t, h, "alice", "jsdemo", c.fn, c.args); r.End != "ok" || string(r.Value) != c.want {
			t.Errorf("optimized: %s(%s) = %s (%s %s), want %s", c.fn, c.args, r.Value, r.End, r.Error, c.want)
		}
	}
	h.Close()

	// A second host on the same directory loads the sealed artifact.
	h2 := newHost(t, Config{Dir: dir})
	if info, err := h2.Load(m, wasm); err != nil || info.Code != "optimized" {
		t.Fatalf("%+v %v", info, err)
	}
	if n := h2.quickCompiles.Load() + h2.fullCompiles.Load(); n != 0 {
		t.Fatalf("the second host compiled %d times; the artifact was not reused", n)
	}
	if r := call(t, h2, "alice", "jsdemo", "greet", `{"name": "again"}`); string(r.Value) != `"hello, again"` {
		t.Fatalf("greet from the cached artifact: %s (%s %s)", r.Value, r.End, r.Error)
	}
}
