package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/sandbox"
)

const counters = "wovyr:test/counters#"

func tallyHost(t *testing.T, cfg Config) *Host {
	t.Helper()
	h := newHost(t, cfg)
	tally := component(t, "tally")
	if _, err := h.Load(signed("tally", tally), tally); err != nil {
		t.Fatal(err)
	}
	return h
}

// handle is a resource's JSON form, read from a result.
type handle struct {
	Resource string `json:"resource"`
	Handle   uint64 `json:"handle"`
}

func (h handle) arg() string {
	return fmt.Sprintf(`{"resource": %q, "handle": %d}`, h.Resource, h.Handle)
}

func made(t *testing.T, h *Host, tenant string, start int) handle {
	t.Helper()
	r := call(t, h, tenant, "tally", counters+"[constructor]counter", fmt.Sprintf(`{"start": %d}`, start))
	var c handle
	if err := json.Unmarshal(r.Value, &c); err != nil || r.End != "ok" || c.Resource != "counter" || c.Handle == 0 {
		t.Fatalf("constructor: %s %s (%v)", r.End, r.Value, err)
	}
	return c
}

func value(t *testing.T, h *Host, tenant, fn, args string) string {
	t.Helper()
	r := call(t, h, tenant, "tally", counters+fn, args)
	if r.End != "ok" {
		t.Fatalf("%s(%s) ended %s: %s", fn, args, r.End, r.Error)
	}
	return string(r.Value)
}

func badInput(t *testing.T, h *Host, tenant, fn, args, field, msg string) {
	t.Helper()
	_, err := h.Call(context.Background(), tenant, "tally", counters+fn, json.RawMessage(args), CallOptions{})
	if sandbox.ClassOf(err) != sandbox.BadInput || sandbox.FieldOf(err) != field || !strings.Contains(err.Error(), msg) {
		t.Fatalf("%s(%s): %v (field %q), want bad-input at %s saying %q", fn, args, err, sandbox.FieldOf(err), field, msg)
	}
}

func TestResourcesAcrossCalls(t *testing.T) {
	h := tallyHost(t, Config{Dir: t.TempDir()})
	a := made(t, h, "acme", 5)
	// The resource lives in the instance that made it, call after call.
	value(t, h, "acme", "[method]counter.incr", fmt.Sprintf(`{"self": %s, "by": 2}`, a.arg()))
	if got := value(t, h, "acme", "[method]counter.incr", fmt.Sprintf(`[{"handle": %d}, 3]`, a.Handle)); got != "10" {
		t.Fatalf("incr: %s, want 10", got)
	}
	// A call without handles never lands on the instance that holds them.
	var other []handle
	if r := call(t, h, "acme", "tally", counters+"pair", `{"a": 1, "b": 2}`); !r.Fresh || json.Unmarshal(r.Value, &other) != nil {
		t.Fatalf("pair ran on the pinned instance, or returned %s", r.Value)
	}
	for _, c := range other {
		value(t, h, "acme", "[resource-drop]counter", fmt.Sprintf(`{"self": %s}`, c.arg()))
	}

	// Resources inside values; handles of two instances cannot meet.
	var pair []handle
	r := call(t, h, "acme", "tally", counters+"pair", `{"a": 1, "b": 2}`)
	if err := json.Unmarshal(r.Value, &pair); err != nil || len(pair) != 2 {
		t.Fatalf("pair: %s", r.Value)
	}
	both := fmt.Sprintf(`{"cs": [%s, %s]}`, pair[0].arg(), pair[1].arg())
	if got := value(t, h, "acme", "total", both); got != "3" {
		t.Fatalf("total: %s", got)
	}
	badInput(t, h, "acme", "total", fmt.Sprintf(`{"cs": [%s, %s]}`, pair[0].arg(), a.arg()), "args.cs",
		"resources made by different calls' instances cannot meet in one call")

	// Bad handles change nothing.
	badInput(t, h, "acme", "[method]counter.value", `{"self": 7}`, "args.self", `expected borrow<counter>, a handle {"resource": "counter", "handle": n}, got 7`)
	badInput(t, h, "acme", "[method]counter.value", `{"self": {"resource": "widget", "handle": 1}}`, "args.self.resource", `expected a handle of counter, got one of "widget"`)
	badInput(t, h, "acme", "[method]counter.value", `{"self": {"handle": 999999}}`, "args.self", "no resource with handle 999999 is held for tenant acme")
	badInput(t, h, "acme", "merge", fmt.Sprintf(`{"a": %s, "b": %s}`, pair[0].arg(), pair[0].arg()), "args.b",
		"is passed to its new owner and again in the same call")
	if got := value(t, h, "acme", "[method]counter.value", fmt.Sprintf(`{"self": %s}`, a.arg())); got != "10" {
		t.Fatalf("value after refused calls: %s", got)
	}

	// Another tenant's handle is as unknown as a made-up one.
	badInput(t, h, "globex", "[method]counter.value", fmt.Sprintf(`{"self": %s}`, a.arg()), "args.self",
		fmt.Sprintf("no resource with handle %d is held for tenant globex", a.Handle))

	// own hands a resource to the call: the guest destroys it, the handle is gone.
	var m handle
	r = call(t, h, "acme", "tally", counters+"merge", fmt.Sprintf(`{"a": %s, "b": %s}`, pair[0].arg(), pair[1].arg()))
	if err := json.Unmarshal(r.Value, &m); err != nil || r.End != "ok" {
		t.Fatalf("merge: %s %s", r.End, r.Value)
	}
	if got := value(t, h, "acme", "[method]counter.live", fmt.Sprintf(`{"self": %s}`, m.arg())); got != "1" {
		t.Fatalf("live after merge: %s, want 1 (the merged two destroyed)", got)
	}
	badInput(t, h, "acme", "[method]counter.value", fmt.Sprintf(`{"self": %s}`, pair[0].arg()), "args.self",
		fmt.Sprintf("no resource with handle %d is held", pair[0].Handle))

	// Dropping the last handle unpins the instance: back among the idle ones.
	if got := value(t, h, "acme", "[resource-drop]counter", fmt.Sprintf(`{"self": %s}`, m.arg())); got != "null" {
		t.Fatalf("drop: %s", got)
	}
	badInput(t, h, "acme", "[resource-drop]counter", fmt.Sprintf(`{"self": %s}`, m.arg()), "args.self", "no resource with handle")
	if got := value(t, h, "acme", "finish", fmt.Sprintf(`{"c": %s}`, a.arg())); got != "10" {
		t.Fatalf("finish: %s", got)
	}
	p, _ := h.acquire("tally")
	defer p.release()
	p.mu.Lock()
	pinned := len(p.pinned)
	p.mu.Unlock()
	if pinned != 0 {
		t.Fatalf("%d tenants still pin instances with every handle given back", pinned)
	}
}

func TestResourcesGoWithAFailedInstance(t *testing.T) {
	h := tallyHost(t, Config{Dir: t.TempDir()})
	a, b := made(t, h, "acme", 1), handle{}
	r := call(t, h, "acme", "tally", counters+"[method]counter.boom", fmt.Sprintf(`{"self": %s}`, a.arg()))
	if r.End != "trap" {
		t.Fatalf("boom ended %s", r.End)
	}
	badInput(t, h, "acme", "[method]counter.value", fmt.Sprintf(`{"self": %s}`, a.arg()), "args.self", "no resource with handle")
	// A fresh instance starts with no counters: nothing of the trapped one survived.
	b = made(t, h, "acme", 2)
	if got := value(t, h, "acme", "[method]counter.live", fmt.Sprintf(`{"self": %s}`, b.arg())); got != "1" {
		t.Fatalf("live in the next instance: %s", got)
	}
}

func TestResourcesPinnedPerTenantAreBounded(t *testing.T) {
	h := tallyHost(t, Config{Dir: t.TempDir()})
	// Each constructor runs on an instance that holds no handles, so each
	// pins another; past MaxPinned the least recently used goes.
	var hs []handle
	for i := 0; i < MaxPinned; i++ {
		hs = append(hs, made(t, h, "acme", i))
	}
	value(t, h, "acme", "[method]counter.value", fmt.Sprintf(`{"self": %s}`, hs[0].arg())) // the first is used last
	for i := 0; i < 3; i++ {
		hs = append(hs, made(t, h, "acme", 99))
	}
	p, _ := h.acquire("tally")
	n := len(p.pinned["acme"])
	p.release()
	if n != MaxPinned {
		t.Fatalf("%d pinned instances, want the bound, %d", n, MaxPinned)
	}
	// The three least recently used went, their handles with them.
	for _, c := range hs[1:4] {
		badInput(t, h, "acme", "[method]counter.value", fmt.Sprintf(`{"self": %s}`, c.arg()), "args.self", "no resource with handle")
	}
	for _, c := range append([]handle{hs[0]}, hs[4:]...) {
		value(t, h, "acme", "[method]counter.value", fmt.Sprintf(`{"self": %s}`, c.arg()))
	}
}
