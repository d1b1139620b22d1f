package plugin

import (
	"maps"
	"reflect"
	"testing"

	"github.com/wovyr/wovyr/internal/wasmcapi"
)

// flatSeeds are inputs on both sides of the fast path's edge.
var flatSeeds = []string{
	`{}`, `[]`, ` { } `, `{"a": 40, "b": 2}`, `[40, 2]`, `{"a":1,"a":2}`, `{"s": "wövyr"}`,
	`{"x": -0, "y": 1.5e-3, "z": 1E+9}`, `[true, false, "t"]`, `{"a": 01}`, `{"a": 1.}`, `{"a": -}`,
	`{"a": .5}`, `{"a": "\u0041"}`, `{"a": "tab	"}`, `{"a": "\xff"}`, `{"a": null}`, `{"a": [1]}`,
	`{"a": 1,}`, `[1,]`, `{"a" 1}`, `{"a": 1} x`, `{"a": 1}{"b": 2}`, `[1 2]`, `{a: 1}`, `{"a": tru}`,
	`{"a": 1e}`, `{"a": 18446744073709551616}`, "[\n1,\r\n2\t]", `7`, `"x"`, `{"a": "x"`,
	`[0, -0, 127, 128, -128, -129, 255, 256, 32767, 32768, -32768, -32769]`,
	`[65535, 65536, 2147483647, 2147483648, -2147483648, -2147483649, 4294967295, 4294967296]`,
	`[9223372036854775807, 9223372036854775808, -9223372036854775808, -9223372036854775809]`,
	`[18446744073709551615, 18446744073709551616, 99999999999999999999, 100000000000000000000]`,
	`[1.0, 1e3, -1, 1E2, "1", "", "é", true, false]`, `[1,2,3,4,5,6,7,8]`, `[1,2,3,4,5,6,7,8,9]`,
}

// quickKinds are the types quickVal is tried against, itself quick or not.
var quickKinds = []wasmcapi.Kind{wasmcapi.KindBool, wasmcapi.KindS8, wasmcapi.KindS16, wasmcapi.KindS32, wasmcapi.KindS64,
	wasmcapi.KindU8, wasmcapi.KindU16, wasmcapi.KindU32, wasmcapi.KindU64, wasmcapi.KindF32, wasmcapi.KindF64,
	wasmcapi.KindChar, wasmcapi.KindString}

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
	var fast flatArgs
	if !scanFlat([]byte(raw), &fast) {
		return
	}
	slow, err := decodeArgs(nil, []byte(raw))
	if err != nil {
		t.Fatalf("%q: the fast path accepted what the decoder refuses: %v", raw, err)
	}
	if fast.array != slow.array {
		t.Fatalf("%q: array %v vs %v", raw, fast.array, slow.array)
	}
	values := make([]any, fast.n)
	for i, tok := range fast.toks[:fast.n] {
		values[i] = tok.value()
		// What quickVal converts, fromJSON converts to the same value.
		for _, k := range quickKinds {
			typ := &wasmcapi.Type{Kind: k}
			var q wasmcapi.Val
			if quickVal(typ, tok, &q) {
				if v, err := fromJSON(typ, values[i], "x"); err != nil || !reflect.DeepEqual(q, v) {
					t.Fatalf("%q: %s as %s: quick %+v, fromJSON %+v (%v)", raw, tok.b, typ, q, v, err)
				}
			}
		}
	}
	if fast.array {
		if !reflect.DeepEqual(values, slow.values) && !(len(values) == 0 && len(slow.values) == 0) {
			t.Fatalf("%q: fast %#v, decoder %#v", raw, values, slow.values)
		}
		return
	}
	last := map[string]any{}
	for i, k := range fast.names[:fast.n] {
		last[string(k)] = values[i]
	}
	want := map[string]any{}
	for i, k := range slow.names {
		want[k] = slow.values[i]
	}
	if !maps.EqualFunc(last, want, func(a, b any) bool { return reflect.DeepEqual(a, b) }) {
		t.Fatalf("%q: fast %#v, decoder %#v", raw, last, want)
	}
}

// TestQuickValTakesTheCommonScalars: the boundaries of each integer type,
// bools and plain strings are converted without fromJSON; what it declines
// (a fraction, an exponent, a value out of range, another type) fromJSON
// converts or refuses.
func TestQuickValTakesTheCommonScalars(t *testing.T) {
	num := func(s string) token { return token{'n', []byte(s)} }
	for _, c := range []struct {
		kind wasmcapi.Kind
		tok  token
		ok   bool
	}{
		{wasmcapi.KindS8, num("-128"), true}, {wasmcapi.KindS8, num("127"), true}, {wasmcapi.KindS8, num("128"), false},
		{wasmcapi.KindS8, num("-129"), false}, {wasmcapi.KindS64, num("-9223372036854775808"), true},
		{wasmcapi.KindS64, num("9223372036854775808"), false}, {wasmcapi.KindS32, num("-0"), true},
		{wasmcapi.KindU8, num("255"), true}, {wasmcapi.KindU8, num("256"), false}, {wasmcapi.KindU32, num("-0"), false},
		{wasmcapi.KindU64, num("18446744073709551615"), true}, {wasmcapi.KindU64, num("18446744073709551616"), false},
		{wasmcapi.KindU32, num("1e3"), false}, {wasmcapi.KindU32, num("1.0"), false},
		{wasmcapi.KindBool, token{kind: 't'}, true}, {wasmcapi.KindBool, num("1"), false},
		{wasmcapi.KindString, token{'"', []byte("wövyr")}, true}, {wasmcapi.KindString, token{kind: 't'}, false},
		{wasmcapi.KindF64, num("1"), false}, {wasmcapi.KindChar, token{'"', []byte("x")}, false},
	} {
		var v wasmcapi.Val
		if ok := quickVal(&wasmcapi.Type{Kind: c.kind}, c.tok, &v); ok != c.ok {
			t.Errorf("%s %q: quick %v, want %v", c.kind, c.tok.b, ok, c.ok)
		}
	}
}
