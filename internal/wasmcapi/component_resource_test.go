package wasmcapi

import (
	"context"
	"errors"
	"testing"
)

const tallyComponent = "../../plugin/testdata/tally/tally.wasm"

const counters = "wovyr:test/counters#"

func tallyInstance(t *testing.T) (*Component, *Instance, func(name string, args ...Val) *CallResult) {
	t.Helper()
	e := componentEngine(t)
	c := loadComponent(t, e, tallyComponent, true)
	in := instance(t, e, c)
	call := func(name string, args ...Val) *CallResult {
		t.Helper()
		f, ok := c.Func(counters + name)
		if !ok {
			t.Fatalf("no export %s", name)
		}
		r, err := in.Call(context.Background(), f, args, CallSpec{Fuel: 1e6})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.End != CallOK {
			t.Fatalf("%s ended %s: %s", name, r.End, r.Message)
		}
		return r
	}
	return c, in, call
}

func TestResourceTypesAndNames(t *testing.T) {
	c, _, _ := tallyInstance(t)
	res := c.Resources()
	if len(res) != 1 || res[0].Iface != "wovyr:test/counters" || res[0].Resource.Name != "counter" {
		t.Fatalf("resources %+v", res)
	}
	want := map[string]string{
		"[constructor]counter": "(start: u32) -> counter",
		"[method]counter.incr": "(self: borrow<counter>, by: u32) -> u32",
		"[method]counter.boom": "(self: borrow<counter>)",
		"finish":               "(c: counter) -> u32",
		"pair":                 "(a: u32, b: u32) -> list<counter>",
		"total":                "(cs: list<borrow<counter>>) -> u64",
	}
	for name, sig := range want {
		f, ok := c.Func(counters + name)
		if !ok {
			t.Fatalf("no export %s", name)
		}
		got := "("
		for i, p := range f.Type.Params {
			if i > 0 {
				got += ", "
			}
			got += p.Name + ": " + p.Type.String()
		}
		got += ")"
		if f.Type.Result != nil {
			got += " -> " + f.Type.Result.String()
		}
		if got != sig {
			t.Errorf("%s: %s, want %s", name, got, sig)
		}
		for _, p := range f.Type.Params {
			if p.Type.Kind == KindResource && p.Type.Resource != res[0].Resource {
				t.Errorf("%s: parameter %s has another resource", name, p.Name)
			}
		}
	}
}

func TestResourceHandles(t *testing.T) {
	c, in, call := tallyInstance(t)
	a := call("[constructor]counter", u32(5)).Result
	if a.Kind != KindResource || a.Handle == 0 {
		t.Fatalf("constructor returned %+v", a)
	}
	// A borrow leaves the handle held: the state is the guest's, call to call.
	call("[method]counter.incr", *a, u32(2))
	if got := call("[method]counter.incr", *a, u32(3)).Result.Uint; got != 10 {
		t.Fatalf("incr: %d, want 10", got)
	}
	pair := call("pair", u32(1), u32(2)).Result
	if len(pair.Elems) != 2 || in.Handles() != 3 {
		t.Fatalf("pair %+v, %d handles", pair, in.Handles())
	}
	all := Val{Kind: KindList, Elems: []Val{*a, pair.Elems[0], pair.Elems[1]}}
	if got := call("total", all).Result.Uint; got != 13 {
		t.Fatalf("total %d, want 13", got)
	}
	if got := call("[method]counter.live", *a).Result.Uint; got != 3 {
		t.Fatalf("live %d, want 3", got)
	}

	// own hands it over: the guest destroys it, and the host holds it no more.
	if got := call("finish", *a).Result.Uint; got != 10 {
		t.Fatalf("finish %d, want 10", got)
	}
	if in.HandleSet()[a.Handle] || in.Handles() != 2 {
		t.Fatalf("after finish: held %v, %d handles", in.HandleSet()[a.Handle], in.Handles())
	}
	f, _ := c.Func(counters + "[method]counter.value")
	_, err := in.Call(context.Background(), f, []Val{*a}, CallSpec{})
	var he *HandleError
	if !errors.As(err, &he) || he.Param != "self" || he.Handle != a.Handle || he.Reason != "is not held by this instance" {
		t.Fatalf("a consumed handle: %v", err)
	}
	if in.Poisoned() {
		t.Fatal("a refused handle poisoned the instance")
	}
	// Two borrows of one handle in one call are fine; one handle passed to
	// its new owner and again is refused before anything runs.
	total, _ := c.Func(counters + "total")
	twice := Val{Kind: KindList, Elems: []Val{pair.Elems[0], pair.Elems[0]}}
	if r, err := in.Call(context.Background(), total, []Val{twice}, CallSpec{}); err != nil || r.Result.Uint != 2 {
		t.Fatalf("two borrows of one handle: %v %+v", err, r)
	}
	merge, _ := c.Func(counters + "merge")
	_, err = in.Call(context.Background(), merge, []Val{pair.Elems[0], pair.Elems[0]}, CallSpec{})
	if !errors.As(err, &he) || he.Param != "b" || he.Reason != "is passed to its new owner and again in the same call" {
		t.Fatalf("one handle owned twice: %v", err)
	}
	if !in.HandleSet()[pair.Elems[0].Handle] || in.Poisoned() {
		t.Fatal("a refused call took its handle or poisoned the instance")
	}

	// Drop runs the destructor.
	r, err := in.Drop(context.Background(), pair.Elems[0].Handle, CallSpec{Fuel: 1e6})
	if err != nil || r.End != CallOK {
		t.Fatalf("drop: %v %+v", err, r)
	}
	if got := call("[method]counter.live", pair.Elems[1]).Result.Uint; got != 1 {
		t.Fatalf("live after drop %d, want 1", got)
	}
	if _, err := in.Drop(context.Background(), pair.Elems[0].Handle, CallSpec{}); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second drop: %v", err)
	}

	// A trap poisons the instance; its handles go with it.
	f, _ = c.Func(counters + "[method]counter.boom")
	r, err = in.Call(context.Background(), f, []Val{pair.Elems[1]}, CallSpec{})
	if err != nil || r.End != CallTrap || !in.Poisoned() {
		t.Fatalf("boom: %v %+v", err, r)
	}
}

func TestResourceHandleOfAnotherInstance(t *testing.T) {
	c, in, call := tallyInstance(t)
	a := call("[constructor]counter", u32(1)).Result
	other := instance(t, c.engine, c)
	f, _ := c.Func(counters + "finish")
	_, err := other.Call(context.Background(), f, []Val{*a}, CallSpec{})
	var he *HandleError
	if !errors.As(err, &he) || he.Reason != "is not held by this instance" {
		t.Fatalf("another instance's handle: %v", err)
	}
	if !in.HandleSet()[a.Handle] {
		t.Fatal("the refused call took the handle from its instance")
	}
}
