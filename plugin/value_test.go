package plugin

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/sandbox"
)

func ty(k wasmcapi.Kind) *wasmcapi.Type { return &wasmcapi.Type{Kind: k} }

// point, shape … are calc.wit's types, as Wasmtime reports them.
var (
	point   = &wasmcapi.Type{Kind: wasmcapi.KindRecord, Fields: []wasmcapi.Field{{Name: "x", Type: ty(wasmcapi.KindS32)}, {Name: "y", Type: ty(wasmcapi.KindS32)}}}
	counter = &wasmcapi.Resource{Name: "counter"}
	shape   = &wasmcapi.Type{Kind: wasmcapi.KindVariant, Fields: []wasmcapi.Field{{Name: "circle", Type: ty(wasmcapi.KindU32)}, {Name: "square", Type: ty(wasmcapi.KindU32)}, {Name: "dot"}}}
)

func TestArgsRefuseMismatchesNamingTheParameter(t *testing.T) {
	add := &wasmcapi.FuncType{Params: []wasmcapi.Field{{Name: "a", Type: ty(wasmcapi.KindU32)}, {Name: "b", Type: ty(wasmcapi.KindU32)}}, Result: ty(wasmcapi.KindU32)}
	swap := &wasmcapi.FuncType{Params: []wasmcapi.Field{{Name: "p", Type: point}}}
	area := &wasmcapi.FuncType{Params: []wasmcapi.Field{{Name: "s", Type: shape}}}
	for _, c := range []struct {
		ft          *wasmcapi.FuncType
		args        string
		field, want string
	}{
		{add, `{"a": 1, "b": "2"}`, "args.b", `bad-input (args.b): expected u32, got "2"`},
		{add, `{"a": -1, "b": 2}`, "args.a", `bad-input (args.a): expected u32, got -1`},
		{add, `{"a": 4294967296, "b": 2}`, "args.a", `bad-input (args.a): expected u32, got 4294967296`},
		{add, `{"a": 1.5, "b": 2}`, "args.a", `bad-input (args.a): expected u32, got 1.5`},
		{add, `{"a": 1}`, "args.b", `bad-input (args.b): missing argument b: expected u32`},
		{add, `{"a": 1, "b": 2, "c": 3}`, "args.c", `bad-input (args.c): the function has no parameter "c" (it takes a: u32, b: u32)`},
		{add, `[1]`, "args", `bad-input (args): the function takes 2 arguments (a: u32, b: u32), got 1`},
		{add, `[1, 2`, "args", `bad-input (args): arguments are not JSON: unexpected EOF`},
		{add, `7`, "args", `bad-input (args): arguments must be a JSON object by parameter name or an array (the function takes a: u32, b: u32)`},
		{swap, `{"p": {"x": 1}}`, "args.p.y", `bad-input (args.p.y): missing field y: expected s32`},
		{swap, `{"p": {"x": 1, "y": 2, "z": 3}}`, "args.p.z", `bad-input (args.p.z): expected record { x: s32, y: s32 }, which has no field "z"`},
		{swap, `{"p": [1, 2]}`, "args.p", `bad-input (args.p): expected record { x: s32, y: s32 }, got an array of 2`},
		{area, `{"s": {"tag": "hexagon"}}`, "args.s", `bad-input (args.s): expected variant { circle(u32), square(u32), dot }, got an object`},
		{area, `{"s": {"tag": "circle"}}`, "args.s.val", `bad-input (args.s.val): missing payload of case circle: expected u32`},
		{area, `{"s": {"tag": "dot", "val": 1}}`, "args.s.val", `bad-input (args.s.val): case dot of variant { circle(u32), square(u32), dot } has no payload`},
	} {
		_, err := Args(c.ft, json.RawMessage(c.args))
		if err == nil || err.Error() != c.want || sandbox.ClassOf(err) != sandbox.BadInput || sandbox.FieldOf(err) != c.field {
			t.Errorf("%s:\n got %v (field %q)\nwant %s", c.args, err, sandbox.FieldOf(err), c.want)
		}
	}
	got, err := Args(add, json.RawMessage(`[40, 2]`))
	if err != nil || got[0].Uint != 40 || got[1].Uint != 2 {
		t.Fatalf("positional: %+v %v", got, err)
	}
}

// TestJSONRoundTripsEveryType is the property test: for random WIT types
// and random values of them, Value then Args gives the value back.
func TestJSONRoundTripsEveryType(t *testing.T) {
	r := rand.New(rand.NewPCG(20, 32))
	seen := map[wasmcapi.Kind]bool{}
	for i := 0; i < 3000; i++ {
		typ := randType(r, 3)
		v := randVal(r, typ, seen)
		js, err := Value(typ, &v)
		if err != nil {
			t.Fatalf("Value(%s, %+v): %v", typ, v, err)
		}
		ft := &wasmcapi.FuncType{Params: []wasmcapi.Field{{Name: "x", Type: typ}}}
		back, err := Args(ft, json.RawMessage(`{"x":`+string(js)+`}`))
		if err != nil {
			t.Fatalf("Args(%s, %s): %v", typ, js, err)
		}
		if !sameVal(back[0], v) {
			t.Fatalf("%s: %s came back as %+v, want %+v", typ, js, back[0], v)
		}
	}
	for k := wasmcapi.KindBool; k < wasmcapi.KindUnsupported; k++ {
		if !seen[k] {
			t.Errorf("no %s value was generated", k)
		}
	}
}

// sameVal compares values, NaN equal to NaN.
func sameVal(a, b wasmcapi.Val) bool {
	if math.IsNaN(a.Float) && math.IsNaN(b.Float) {
		a.Float, b.Float = 0, 0
	}
	if len(a.Elems) != len(b.Elems) || (a.Payload == nil) != (b.Payload == nil) {
		return false
	}
	for i := range a.Elems {
		if !sameVal(a.Elems[i], b.Elems[i]) {
			return false
		}
	}
	if a.Payload != nil && !sameVal(*a.Payload, *b.Payload) {
		return false
	}
	a.Elems, b.Elems, a.Payload, b.Payload = nil, nil, nil, nil
	if len(a.Names) == 0 && len(b.Names) == 0 {
		a.Names, b.Names = nil, nil
	}
	return reflect.DeepEqual(a, b)
}

var scalars = []wasmcapi.Kind{wasmcapi.KindBool, wasmcapi.KindS8, wasmcapi.KindU8, wasmcapi.KindS16, wasmcapi.KindU16,
	wasmcapi.KindS32, wasmcapi.KindU32, wasmcapi.KindS64, wasmcapi.KindU64, wasmcapi.KindF32, wasmcapi.KindF64,
	wasmcapi.KindChar, wasmcapi.KindString}

func randType(r *rand.Rand, depth int) *wasmcapi.Type {
	k := wasmcapi.Kind(r.IntN(int(wasmcapi.KindUnsupported)))
	if depth == 0 {
		k = scalars[r.IntN(len(scalars))]
	}
	t := &wasmcapi.Type{Kind: k}
	names := func() []string { return []string{"a", "b-c", "d"}[:1+r.IntN(3)] }
	switch k {
	case wasmcapi.KindList, wasmcapi.KindOption:
		t.Elem = randType(r, depth-1)
	case wasmcapi.KindRecord, wasmcapi.KindTuple:
		for _, n := range names() {
			if k == wasmcapi.KindTuple {
				n = ""
			}
			t.Fields = append(t.Fields, wasmcapi.Field{Name: n, Type: randType(r, depth-1)})
		}
	case wasmcapi.KindVariant:
		for _, n := range names() {
			f := wasmcapi.Field{Name: n}
			if r.IntN(2) == 0 {
				f.Type = randType(r, depth-1)
			}
			t.Fields = append(t.Fields, f)
		}
	case wasmcapi.KindEnum, wasmcapi.KindFlags:
		t.Names = names()
	case wasmcapi.KindResource:
		t.Resource, t.Borrow = counter, r.IntN(2) == 0
	case wasmcapi.KindResult:
		if r.IntN(3) > 0 {
			t.Ok = randType(r, depth-1)
		}
		if r.IntN(3) > 0 {
			t.Err = randType(r, depth-1)
		}
	}
	return t
}

func randVal(r *rand.Rand, t *wasmcapi.Type, seen map[wasmcapi.Kind]bool) wasmcapi.Val {
	seen[t.Kind] = true
	v := wasmcapi.Val{Kind: t.Kind}
	bits := map[wasmcapi.Kind]uint{wasmcapi.KindS8: 8, wasmcapi.KindS16: 16, wasmcapi.KindS32: 32, wasmcapi.KindS64: 64,
		wasmcapi.KindU8: 8, wasmcapi.KindU16: 16, wasmcapi.KindU32: 32, wasmcapi.KindU64: 64}[t.Kind]
	sub := func(t *wasmcapi.Type) *wasmcapi.Val {
		x := randVal(r, t, seen)
		return &x
	}
	switch t.Kind {
	case wasmcapi.KindBool:
		v.Bool = r.IntN(2) == 0
	case wasmcapi.KindS8, wasmcapi.KindS16, wasmcapi.KindS32, wasmcapi.KindS64:
		v.Int = int64(r.Uint64()) >> (64 - bits) // the full signed range
	case wasmcapi.KindU8, wasmcapi.KindU16, wasmcapi.KindU32, wasmcapi.KindU64:
		v.Uint = r.Uint64() >> (64 - bits)
	case wasmcapi.KindF32:
		v.Float = float64([]float32{1.5, -0.1, math.MaxFloat32, float32(r.NormFloat64())}[r.IntN(4)])
	case wasmcapi.KindF64:
		v.Float = []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0.1, r.NormFloat64() * 1e300}[r.IntN(5)]
	case wasmcapi.KindChar:
		v.Char = []rune{'a', 'λ', '😀', '"'}[r.IntN(4)]
	case wasmcapi.KindString:
		v.Str = []string{"", "héllo", "quote\" and \\ and \n", "<&>"}[r.IntN(4)]
	case wasmcapi.KindList:
		v.Elems = []wasmcapi.Val{}
		for range r.IntN(3) {
			v.Elems = append(v.Elems, randVal(r, t.Elem, seen))
		}
	case wasmcapi.KindTuple, wasmcapi.KindRecord:
		for _, f := range t.Fields {
			v.Elems = append(v.Elems, randVal(r, f.Type, seen))
			if t.Kind == wasmcapi.KindRecord {
				v.Names = append(v.Names, f.Name)
			}
		}
	case wasmcapi.KindVariant:
		c := t.Fields[r.IntN(len(t.Fields))]
		v.Str = c.Name
		if c.Type != nil {
			v.Payload = sub(c.Type)
		}
	case wasmcapi.KindEnum:
		v.Str = t.Names[r.IntN(len(t.Names))]
	case wasmcapi.KindOption:
		if r.IntN(2) == 0 {
			v.Payload = sub(t.Elem)
		}
	case wasmcapi.KindResult:
		v.Ok = r.IntN(2) == 0
		if pt := map[bool]*wasmcapi.Type{true: t.Ok, false: t.Err}[v.Ok]; pt != nil {
			v.Payload = sub(pt)
		}
	case wasmcapi.KindFlags:
		v.Names = []string{}
		for _, n := range t.Names {
			if r.IntN(2) == 0 {
				v.Names = append(v.Names, n)
			}
		}
	case wasmcapi.KindResource:
		v.Handle = 1 + r.Uint64()>>1
	}
	return v
}
