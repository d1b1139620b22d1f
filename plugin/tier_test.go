package plugin

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// TestSwapWaitsForAnIdlePlugin: tier-up's swap replaces a plugin only
// while nothing would be lost — no call in flight, no resource held for a
// tenant — and gives up for a plugin that was installed again meanwhile.
func TestSwapWaitsForAnIdlePlugin(t *testing.T) {
	h := newHost(t, Config{})
	tally := component(t, "tally")
	m := signed("tally", tally)
	if _, err := h.Load(m, tally); err != nil {
		t.Fatal(err)
	}
	old, _ := h.acquire("tally")
	old.release()
	// The optimized plugin, as tierUp builds it: the same manifest, a new
	// component.
	next := func() *Plugin {
		c, err := h.compileSealed("", "", tally)
		if err != nil {
			t.Fatal(err)
		}
		np, err := h.plugin(&old.manifest, old.limits, c, nil)
		if err != nil {
			t.Fatal(err)
		}
		return np
	}
	swapped := func(np *Plugin) chan bool {
		done := make(chan bool, 1)
		go func() { done <- h.swap(old, np) }()
		return done
	}
	quiet := func(done chan bool, why string) {
		t.Helper()
		select {
		case ok := <-done:
			t.Fatalf("swapped (%v) while %s", ok, why)
		case <-time.After(3 * tierRetry):
		}
	}

	// A resource held for a tenant keeps the old plugin in.
	r := call(t, h, "acme", "tally", counters+"[constructor]counter", `{"start": 1}`)
	var c handle
	if err := json.Unmarshal(r.Value, &c); err != nil {
		t.Fatal(err)
	}
	np := next()
	done := swapped(np)
	quiet(done, "a tenant holds a resource in the old plugin")
	// So does a call in flight (its reference).
	inFlight, _ := h.acquire("tally")
	value(t, h, "acme", "[resource-drop]counter", fmt.Sprintf(`{"self": %s}`, c.arg()))
	quiet(done, "a call is in flight on the old plugin")
	inFlight.release()
	if ok := <-done; !ok {
		t.Fatal("no swap once the plugin was idle")
	}
	cur, _ := h.acquire("tally")
	cur.release()
	if cur != np {
		t.Fatal("the installed plugin is not the swapped-in one")
	}

	// A plugin installed again meanwhile is not replaced by an older compile.
	if _, err := h.Load(m, tally); err != nil {
		t.Fatal(err)
	}
	old = cur
	if ok := h.swap(old, next()); ok {
		t.Fatal("swapped over a newer install")
	}
}
