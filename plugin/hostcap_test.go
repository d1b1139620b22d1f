package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/plugin/plugintest"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

func openStore(t *testing.T, dir string) *store.Store {
	t.Helper()
	st, err := store.Open(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func want(t *testing.T, r *Result, value string) {
	t.Helper()
	if r.End != "ok" || string(r.Value) != value {
		t.Errorf("got %s (%s %s), want %s", r.Value, r.End, r.Error, value)
	}
}

// TestKVAndLog: kvdemo (JavaScript) keeps keys in wovyr:host/kv and logs
// through wovyr:host/log. Keys are the tenant's own and last across
// instances and a new host on the same store; bad keys, big values and the
// quota come back as the interface's errors (not traps); a call keeps its
// first 100 log entries and counts the rest. A host without a store refuses
// the component at load, and so does a manifest that does not grant kv.
func TestKVAndLog(t *testing.T) {
	wasm := plugintest.JS(t, plugintest.Jco(t), "kvdemo")
	dir, stDir := t.TempDir(), t.TempDir()
	m := signed("kvdemo", wasm, "wovyr:host/log", "wovyr:host/kv")

	bare := newHost(t, Config{Dir: dir})
	_, err := bare.Load(m, wasm)
	if sandbox.ClassOf(err) != sandbox.Unenforceable || !strings.Contains(err.Error(),
		"the component imports wovyr:host/kv@0.1.0, but this node has no store for plugin key-value data") {
		t.Fatalf("load without a store: %v", err)
	}
	st := openStore(t, stDir)
	h := newHost(t, Config{Dir: dir, KV: st, KVQuota: 10 << 10})
	_, err = h.Load(signed("kvdemo", wasm, "wovyr:host/log"), wasm)
	if !errors.Is(err, ErrUngranted) || !strings.Contains(err.Error(), "wovyr:host/kv@0.1.0") {
		t.Fatalf("load without the kv grant: %v", err)
	}
	info, err := h.Load(m, wasm)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Imports; !reflect.DeepEqual(got, []string{"wovyr:host/kv@0.1.0", "wovyr:host/log@0.1.0"}) {
		t.Fatalf("imports %v", got)
	}
	// A refused load seals nothing: each load here compiled, quickly (a
	// JavaScript component, tier.go), and only the installed one is being
	// compiled fully in the background.
	if q, f := h.quickCompiles.Load(), h.fullCompiles.Load(); q != 2 || f > 1 || info.Code != "quick" {
		t.Errorf("compiled %d times quickly and %d fully, code %q; want a quick compile for each load", q, f, info.Code)
	}

	want(t, call(t, h, "alice", "kvdemo", "remember", `["colour", "blue"]`), `{"ok":null}`)
	want(t, call(t, h, "alice", "kvdemo", "remember", `["colour", "red"]`), `{"ok":"blue"}`)
	want(t, call(t, h, "bob", "kvdemo", "recall", `["colour"]`), `{"ok":null}`)
	want(t, call(t, h, "bob", "kvdemo", "remember", `["colour", "green"]`), `{"ok":null}`)
	want(t, call(t, h, "alice", "kvdemo", "remember", `["size", "9"]`), `{"ok":null}`)
	want(t, call(t, h, "alice", "kvdemo", "names", `[""]`), `{"ok":["colour","size"]}`)
	want(t, call(t, h, "alice", "kvdemo", "names", `["si"]`), `{"ok":["size"]}`)
	want(t, call(t, h, "alice", "kvdemo", "forget", `["size"]`), `{"ok":true}`)
	want(t, call(t, h, "alice", "kvdemo", "forget", `["size"]`), `{"ok":false}`)
	want(t, call(t, h, "alice", "kvdemo", "remember", `["", "x"]`), `{"err":"invalid: a key cannot be empty"}`)
	want(t, call(t, h, "alice", "kvdemo", "remember", `["a\u0000b", "x"]`), `{"err":"invalid: a key cannot hold NUL"}`)
	long := strings.Repeat("k", 513)
	want(t, call(t, h, "alice", "kvdemo", "remember", `["`+long+`", "x"]`), `{"err":"invalid: a key is at most 512 bytes, this one 513"}`)
	want(t, call(t, h, "alice", "kvdemo", "fill", `[1, 65537]`), `{"err":"after 0: invalid: a value is at most 65536 bytes, this one 65537"}`)
	// Ten values of 1000 bytes and their keys fit in the quota beside
	// alice's colour; the eleventh does not, and is not written.
	want(t, call(t, h, "alice", "kvdemo", "fill", `[20, 1000]`), `{"err":"after 10: quota: the tenant's data of this plugin would pass 10240 bytes"}`)
	if used, _ := st.KVUsage("kvdemo", "alice"); used != int64(10*(1000+9)+len("colour")+len("red")) {
		t.Errorf("alice uses %d bytes", used)
	}
	want(t, call(t, h, "bob", "kvdemo", "fill", `[2, 1000]`), `{"ok":2}`) // bob's quota is his own

	r := call(t, h, "alice", "kvdemo", "shout", `[3]`)
	wantLogs := []LogEntry{{"info", "entry 0", map[string]string{"i": "0"}}, {"info", "entry 1", map[string]string{"i": "1"}}, {"info", "entry 2", map[string]string{"i": "2"}}}
	if !reflect.DeepEqual(r.Logs, wantLogs) || r.LogsDropped != 0 || !strings.HasPrefix(r.Invocation, "pc-") {
		t.Errorf("logs %+v dropped %d invocation %q", r.Logs, r.LogsDropped, r.Invocation)
	}
	if r := call(t, h, "alice", "kvdemo", "shout", `[150]`); len(r.Logs) != 100 || r.LogsDropped != 50 || r.Logs[99].Message != "entry 99" {
		t.Errorf("150 entries: kept %d, dropped %d", len(r.Logs), r.LogsDropped)
	}

	// A new host on the same store (a restart) sees the same data.
	st.Close()
	st = openStore(t, stDir)
	defer st.Close()
	h2 := newHost(t, Config{Dir: dir, KV: st})
	if _, err := h2.Load(m, wasm); err != nil {
		t.Fatal(err)
	}
	want(t, call(t, h2, "alice", "kvdemo", "recall", `["colour"]`), `{"ok":"red"}`)
	want(t, call(t, h2, "bob", "kvdemo", "recall", `["colour"]`), `{"ok":"green"}`)
}

// TestNetworkPolicyNeedsHTTP: a call may carry a network policy only to a
// plugin that imports wovyr:host/http, and nothing runs otherwise.
func TestNetworkPolicyNeedsHTTP(t *testing.T) {
	h := newHost(t, Config{Dir: t.TempDir()})
	calc := component(t, "calc")
	if _, err := h.Load(signed("calc", calc), calc); err != nil {
		t.Fatal(err)
	}
	var opts CallOptions
	if err := json.Unmarshal([]byte(`{"Network": {"allow": [{"host": "example.com", "ports": [443]}]}}`), &opts); err != nil {
		t.Fatal(err)
	}
	_, err := h.Call(context.Background(), "t1", "calc", "counter", nil, opts)
	if sandbox.ClassOf(err) != sandbox.BadInput || !strings.Contains(err.Error(), "plugin calc does not import wovyr:host/http") {
		t.Fatalf("%v", err)
	}
	if r := call(t, h, "t1", "calc", "counter", ``); string(r.Value) != "1" {
		t.Errorf("the refused call ran: counter is %s", r.Value)
	}
}
