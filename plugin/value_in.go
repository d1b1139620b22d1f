package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/sandbox"
)

// The JSON form of WIT values (the same both ways; docs/API.md has the
// table). It follows what jco's JavaScript bindings use where JSON allows:
//
//	bool                 true, false
//	s8 … u64             a number, integral and in range
//	f32, f64             a number, or "nan", "inf", "-inf"
//	char                 a string of one character
//	string, enum         a string (an enum's case name)
//	list, tuple          an array (a tuple's of exactly its length)
//	record               an object with exactly its fields
//	variant              {"tag": "case", "val": payload} ("val" only when the case has one)
//	option               null for none, else the value; option<option<T>> writes some as {"some": v}
//	result               {"ok": v} or {"err": v} (v null when that case has no payload)
//	flags                an array of the names of the flags that are set
//	own<R>, borrow<R>    {"resource": "R", "handle": n}: a handle the call
//	                     that made the resource returned ("resource" may be
//	                     left out of an argument; resource.go)

// Args converts a call's JSON arguments to values of ft's parameter types:
// an object keyed by parameter name, or an array in parameter order. Any
// mismatch is bad-input naming the parameter (field "args.NAME…") and the
// type it expected; nothing is converted partly.
func Args(ft *wasmcapi.FuncType, raw json.RawMessage) ([]wasmcapi.Val, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	f, ok := scanFlat(raw)
	if !ok {
		var err error
		if f, err = decodeArgs(ft, raw); err != nil {
			return nil, err
		}
	}
	in := make([]any, len(ft.Params))
	if f.array {
		if len(f.values) != len(ft.Params) {
			return nil, sandbox.Errorf(sandbox.BadInput, "args", "the function takes %d arguments (%s), got %d", len(ft.Params), paramList(ft), len(f.values))
		}
		copy(in, f.values)
	} else {
		for _, k := range f.names {
			if !slices.ContainsFunc(ft.Params, func(p wasmcapi.Field) bool { return p.Name == k }) {
				return nil, sandbox.Errorf(sandbox.BadInput, "args."+k, "the function has no parameter %q (it takes %s)", k, paramList(ft))
			}
		}
		for i, p := range ft.Params {
			j := -1
			for k, name := range f.names {
				if name == p.Name {
					j = k // a name given twice: the last, as a decoder's map has it
				}
			}
			if j < 0 {
				return nil, sandbox.Errorf(sandbox.BadInput, "args."+p.Name, "missing argument %s: expected %s", p.Name, p.Type)
			}
			in[i] = f.values[j]
		}
	}
	out := make([]wasmcapi.Val, len(ft.Params))
	for i, p := range ft.Params {
		// The path names only an error: a scalar's is made if it fails.
		path := ""
		if p.Type.Kind > wasmcapi.KindString {
			path = "args." + p.Name
		}
		val, err := fromJSON(p.Type, in[i], path)
		if err != nil && path == "" {
			_, err = fromJSON(p.Type, in[i], "args."+p.Name)
		}
		if err != nil {
			return nil, err
		}
		out[i] = val
	}
	return out, nil
}

// decodeArgs is Args' general path: any JSON, numbers kept exact.
func decodeArgs(ft *wasmcapi.FuncType, raw json.RawMessage) (flatArgs, error) {
	var f flatArgs
	v, err := decodeOne(raw)
	switch {
	case errors.Is(err, errMoreThanOne):
		return f, sandbox.Errorf(sandbox.BadInput, "args", "arguments hold more than one JSON value")
	case err != nil:
		return f, sandbox.Errorf(sandbox.BadInput, "args", "arguments are not JSON: %v", err)
	}
	switch a := v.(type) {
	case []any:
		f.array, f.values = true, a
	case map[string]any:
		f.names = slices.Sorted(maps.Keys(a))
		for _, k := range f.names {
			f.values = append(f.values, a[k])
		}
	default:
		return f, sandbox.Errorf(sandbox.BadInput, "args", "arguments must be a JSON object by parameter name or an array (the function takes %s)", paramList(ft))
	}
	return f, nil
}

var errMoreThanOne = errors.New("more than one JSON value")

// decodeOne reads raw as exactly one JSON value, numbers kept exact (the
// form fromJSON reads).
func decodeOne(raw []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, errMoreThanOne
	}
	return v, nil
}

func paramList(ft *wasmcapi.FuncType) string {
	if len(ft.Params) == 0 {
		return "no parameters"
	}
	var b bytes.Buffer
	for i, p := range ft.Params {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %s", p.Name, p.Type)
	}
	return b.String()
}

// mismatch is the bad-input error for x at path, which should be a t.
func mismatch(t *wasmcapi.Type, x any, path string) error {
	return sandbox.Errorf(sandbox.BadInput, path, "expected %s, got %s", t, describe(x))
}

func describe(x any) string {
	switch v := x.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(v)
	case json.Number:
		return v.String()
	case string:
		if len(v) > 40 {
			v = v[:40] + "…"
		}
		return strconv.Quote(v)
	case []any:
		return fmt.Sprintf("an array of %d", len(v))
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", x)
}

var intBits = map[wasmcapi.Kind]int{wasmcapi.KindS8: 8, wasmcapi.KindS16: 16, wasmcapi.KindS32: 32, wasmcapi.KindS64: 64,
	wasmcapi.KindU8: 8, wasmcapi.KindU16: 16, wasmcapi.KindU32: 32, wasmcapi.KindU64: 64}

func fromJSON(t *wasmcapi.Type, x any, path string) (wasmcapi.Val, error) {
	v := wasmcapi.Val{Kind: t.Kind}
	bad := func() (wasmcapi.Val, error) { return v, mismatch(t, x, path) }
	switch t.Kind {
	case wasmcapi.KindBool:
		b, ok := x.(bool)
		if !ok {
			return bad()
		}
		v.Bool = b
	case wasmcapi.KindS8, wasmcapi.KindS16, wasmcapi.KindS32, wasmcapi.KindS64:
		n, ok := x.(json.Number)
		if !ok {
			return bad()
		}
		i, err := strconv.ParseInt(string(n), 10, intBits[t.Kind])
		if err != nil {
			return bad()
		}
		v.Int = i
	case wasmcapi.KindU8, wasmcapi.KindU16, wasmcapi.KindU32, wasmcapi.KindU64:
		n, ok := x.(json.Number)
		if !ok {
			return bad()
		}
		u, err := strconv.ParseUint(string(n), 10, intBits[t.Kind])
		if err != nil {
			return bad()
		}
		v.Uint = u
	case wasmcapi.KindF32, wasmcapi.KindF64:
		f, ok := floatOf(x)
		if !ok {
			return bad()
		}
		if t.Kind == wasmcapi.KindF32 && !math.IsInf(f, 0) && math.IsInf(float64(float32(f)), 0) {
			return bad() // finite, but beyond f32
		}
		if t.Kind == wasmcapi.KindF32 {
			f = float64(float32(f)) // the value the guest will see
		}
		v.Float = f
	case wasmcapi.KindChar:
		s, ok := x.(string)
		if !ok || utf8.RuneCountInString(s) != 1 {
			return bad()
		}
		v.Char, _ = utf8.DecodeRuneInString(s)
	case wasmcapi.KindString:
		s, ok := x.(string)
		if !ok {
			return bad()
		}
		v.Str = s
	case wasmcapi.KindEnum:
		s, ok := x.(string)
		if !ok || !slices.Contains(t.Names, s) {
			return bad()
		}
		v.Str = s
	case wasmcapi.KindList, wasmcapi.KindTuple:
		a, ok := x.([]any)
		if !ok || t.Kind == wasmcapi.KindTuple && len(a) != len(t.Fields) {
			return bad()
		}
		v.Elems = make([]wasmcapi.Val, len(a))
		for i, e := range a {
			et := t.Elem
			if t.Kind == wasmcapi.KindTuple {
				et = t.Fields[i].Type
			}
			var err error
			if v.Elems[i], err = fromJSON(et, e, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return v, err
			}
		}
	case wasmcapi.KindRecord:
		m, ok := x.(map[string]any)
		if !ok {
			return bad()
		}
		for k := range m {
			if !slices.ContainsFunc(t.Fields, func(f wasmcapi.Field) bool { return f.Name == k }) {
				return v, sandbox.Errorf(sandbox.BadInput, path+"."+k, "expected %s, which has no field %q", t, k)
			}
		}
		for _, f := range t.Fields {
			fx, ok := m[f.Name]
			if !ok {
				return v, sandbox.Errorf(sandbox.BadInput, path+"."+f.Name, "missing field %s: expected %s", f.Name, f.Type)
			}
			fv, err := fromJSON(f.Type, fx, path+"."+f.Name)
			if err != nil {
				return v, err
			}
			v.Names = append(v.Names, f.Name)
			v.Elems = append(v.Elems, fv)
		}
	case wasmcapi.KindVariant:
		m, ok := x.(map[string]any)
		if !ok {
			return bad()
		}
		tag, _ := m["tag"].(string)
		i := slices.IndexFunc(t.Fields, func(f wasmcapi.Field) bool { return f.Name == tag })
		if i < 0 {
			return bad()
		}
		for k := range m {
			if k != "tag" && k != "val" {
				return v, sandbox.Errorf(sandbox.BadInput, path+"."+k, "expected %s as {\"tag\": case, \"val\": payload}, which has no key %q", t, k)
			}
		}
		v.Str = tag
		c := t.Fields[i]
		px, has := m["val"]
		if c.Type == nil {
			if has {
				return v, sandbox.Errorf(sandbox.BadInput, path+".val", "case %s of %s has no payload", tag, t)
			}
			break
		}
		if !has {
			return v, sandbox.Errorf(sandbox.BadInput, path+".val", "missing payload of case %s: expected %s", tag, c.Type)
		}
		p, err := fromJSON(c.Type, px, path+".val")
		if err != nil {
			return v, err
		}
		v.Payload = &p
	case wasmcapi.KindOption:
		if x == nil {
			break
		}
		if t.Elem.Kind == wasmcapi.KindOption { // some(v) of a nested option is {"some": v}
			m, ok := x.(map[string]any)
			if !ok || len(m) != 1 || !hasKey(m, "some") {
				return bad()
			}
			x = m["some"]
		}
		p, err := fromJSON(t.Elem, x, path)
		if err != nil {
			return v, err
		}
		v.Payload = &p
	case wasmcapi.KindResult:
		m, ok := x.(map[string]any)
		if !ok || len(m) != 1 || !hasKey(m, "ok") && !hasKey(m, "err") {
			return bad()
		}
		v.Ok = hasKey(m, "ok")
		pt, px, sub := t.Err, m["err"], path+".err"
		if v.Ok {
			pt, px, sub = t.Ok, m["ok"], path+".ok"
		}
		if pt == nil {
			if px != nil {
				return v, sandbox.Errorf(sandbox.BadInput, sub, "expected null: this case of %s has no payload", t)
			}
			break
		}
		p, err := fromJSON(pt, px, sub)
		if err != nil {
			return v, err
		}
		v.Payload = &p
	case wasmcapi.KindFlags:
		a, ok := x.([]any)
		if !ok {
			return bad()
		}
		set := map[string]bool{}
		for i, e := range a {
			s, ok := e.(string)
			if !ok || !slices.Contains(t.Names, s) {
				return v, sandbox.Errorf(sandbox.BadInput, fmt.Sprintf("%s[%d]", path, i), "expected a flag of %s, got %s", t, describe(e))
			}
			set[s] = true
		}
		v.Names = []string{}
		for _, n := range t.Names { // in type order, each once
			if set[n] {
				v.Names = append(v.Names, n)
			}
		}
	case wasmcapi.KindResource:
		m, ok := x.(map[string]any)
		if !ok || !hasKey(m, "handle") || len(m) > 2 || len(m) == 2 && !hasKey(m, "resource") {
			return v, sandbox.Errorf(sandbox.BadInput, path, `expected %s, a handle {"resource": %q, "handle": n}, got %s`, t, t.Resource.Name, describe(x))
		}
		if r, has := m["resource"]; has && r != t.Resource.Name {
			return v, sandbox.Errorf(sandbox.BadInput, path+".resource", "expected a handle of %s, got one of %s", t.Resource.Name, describe(r))
		}
		n, ok := m["handle"].(json.Number)
		h, err := strconv.ParseUint(string(n), 10, 64)
		if !ok || err != nil || h == 0 {
			return v, sandbox.Errorf(sandbox.BadInput, path+".handle", "expected a handle number, got %s", describe(m["handle"]))
		}
		v.Handle = h
	default:
		return v, sandbox.Errorf(sandbox.BadInput, path, "parameters of type %s cannot be passed as JSON yet", t)
	}
	return v, nil
}

func hasKey(m map[string]any, k string) bool { _, ok := m[k]; return ok }

func floatOf(x any) (float64, bool) {
	switch v := x.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		return f, err == nil
	case string:
		switch v {
		case "nan":
			return math.NaN(), true
		case "inf":
			return math.Inf(1), true
		case "-inf":
			return math.Inf(-1), true
		}
	}
	return 0, false
}
