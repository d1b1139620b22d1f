package plugin

import (
	"maps"
	"reflect"
	"testing"
)

// flatSeeds are inputs on both sides of the fast path's edge.
var flatSeeds = []string{
	`{}`, `[]`, ` { } `, `{"a": 40, "b": 2}`, `[40, 2]`, `{"a":1,"a":2}`, `{"s": "wövyr"}`,
	`{"x": -0, "y": 1.5e-3, "z": 1E+9}`, `[true, false, "t"]`, `{"a": 01}`, `{"a": 1.}`, `{"a": -}`,
	`{"a": .5}`, `{"a": "\u0041"}`, `{"a": "tab	"}`, `{"a": "\xff"}`, `{"a": null}`, `{"a": [1]}`,
	`{"a": 1,}`, `[1,]`, `{"a" 1}`, `{"a": 1} x`, `{"a": 1}{"b": 2}`, `[1 2]`, `{a: 1}`, `{"a": tru}`,
	`{"a": 1e}`, `{"a": 18446744073709551616}`, "[\n1,\r\n2\t]", `7`, `"x"`, `{"a": "x"`,
}

// TestFlatAgreesWithDecoder: whatever the fast path accepts, the general
// decoder accepts too and reads the same values (an object's last value of
// a name wins in both); what the decoder refuses, the fast path refuses.
func TestFlatAgreesWithDecoder(t *testing.T) {
	for _, raw := range flatSeeds {
		checkFlat(t, raw)
	}
}

func FuzzFlatArgs(f *testing.F) {
	for _, raw := range flatSeeds {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw string) { checkFlat(t, raw) })
}

func checkFlat(t *testing.T, raw string) {
	t.Helper()
	fast, ok := scanFlat([]byte(raw))
	if !ok {
		return
	}
	slow, err := decodeArgs(nil, []byte(raw))
	if err != nil {
		t.Fatalf("%q: the fast path accepted what the decoder refuses: %v", raw, err)
	}
	if fast.array != slow.array {
		t.Fatalf("%q: array %v vs %v", raw, fast.array, slow.array)
	}
	if fast.array {
		if !reflect.DeepEqual(fast.values, slow.values) && !(len(fast.values) == 0 && len(slow.values) == 0) {
			t.Fatalf("%q: fast %#v, decoder %#v", raw, fast.values, slow.values)
		}
		return
	}
	last := map[string]any{}
	for i, k := range fast.names {
		last[k] = fast.values[i]
	}
	want := map[string]any{}
	for i, k := range slow.names {
		want[k] = slow.values[i]
	}
	if !maps.EqualFunc(last, want, func(a, b any) bool { return reflect.DeepEqual(a, b) }) {
		t.Fatalf("%q: fast %#v, decoder %#v", raw, last, want)
	}
}
