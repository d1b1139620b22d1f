package cluster

import (
	"fmt"
	"testing"
)

// pick is choose then charge, as the puller does.
func (w *weighted) pick(has func(string) bool) string {
	name := w.choose(has)
	if name != "" {
		w.charge(name, has)
	}
	return name
}

// The weighted pick is smooth weighted round-robin over the tenants with
// work: {a:5, b:1, c:1} gives a a b a c a a in every period; a tenant
// without work neither earns nor pays, so one that comes back is not owed
// the picks it missed.
func TestWeightedPicks(t *testing.T) {
	w := newWeighted(map[string]int{"a": 5, "b": 1, "c": 1})
	all := func(string) bool { return true }
	var seq []string
	for range 14 {
		seq = append(seq, w.pick(all))
	}
	if got, want := fmt.Sprint(seq), "[a a b a c a a a a b a c a a]"; got != want {
		t.Fatalf("picks %s, want %s", got, want)
	}
	onlyB := func(n string) bool { return n == "b" }
	for range 3 {
		if got := w.pick(onlyB); got != "b" {
			t.Fatalf("only b has work, picked %s", got)
		}
	}
	if w.credit["a"] != 0 || w.credit["c"] != 0 || w.credit["b"] != 0 {
		t.Fatalf("credits moved while their tenants had no work: %v", w.credit)
	}
	seq = seq[:0]
	for range 7 {
		seq = append(seq, w.pick(all))
	}
	if got, want := fmt.Sprint(seq), "[a a b a c a a]"; got != want {
		t.Fatalf("picks after b alone %s, want %s", got, want)
	}
	if got := w.pick(func(string) bool { return false }); got != "" {
		t.Fatalf("no work, picked %q", got)
	}
	// A weight below one counts as one.
	if w := newWeighted(map[string]int{"x": 0}); w.weight["x"] != 1 {
		t.Fatalf("weight 0 became %d", w.weight["x"])
	}
}
