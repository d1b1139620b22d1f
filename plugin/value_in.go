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
	var f flatArgs
	if scanFlat(raw, &f) {
		var buf [maxFlat]int
		idx, err := order(ft, f.array, f.names[:f.n], f.n, buf[:0])
		if err != nil {
			return nil, err
		}
		out := make([]wasmcapi.Val, len(ft.Params))
		for i, p := range ft.Params {
			t := f.toks[idx[i]]
			if !quickVal(p.Type, t, &out[i]) {
				if out[i], err = convert(p, t.value()); err != nil {
					return nil, err
				}
			}
		}
		return out, nil
	}
	g, err := decodeArgs(ft, raw)
	if err != nil {
		return nil, err
	}
	idx, err := order(ft, g.array, g.names, len(g.values), nil)
	if err != nil {
		return nil, err
	}
	out := make([]wasmcapi.Val, len(ft.Params))
	for i, p := range ft.Params {
		if out[i], err = convert(p, g.values[idx[i]]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// order appends to idx, for each of ft's parameters, the index of its
// argument among the n given: by position in an array, else by name (the
// last of a name given twice, as a decoder's map has it). An argument too
// many or too few is bad-input; of several unknown names, the least is
// named, as the decoder's sorted keys have it.
func order[S string | []byte](ft *wasmcapi.FuncType, array bool, names []S, n int, idx []int) ([]int, error) {
	if array {
		if n != len(ft.Params) {
			return nil, sandbox.Errorf(sandbox.BadInput, "args", "the function takes %d arguments (%s), got %d", len(ft.Params), paramList(ft), n)
		}
		for i := range ft.Params {
			idx = append(idx, i)
		}
		return idx, nil
	}
	unknown, found := "", false
	for _, k := range names {
		if !slices.ContainsFunc(ft.Params, func(p wasmcapi.Field) bool { return p.Name == string(k) }) && (!found || string(k) < unknown) {
			unknown, found = string(k), true
		}
	}
	if found {
		return nil, sandbox.Errorf(sandbox.BadInput, "args."+unknown, "the function has no parameter %q (it takes %s)", unknown, paramList(ft))
	}
	for _, p := range ft.Params {
		j := -1
		for k, name := range names {
			if string(name) == p.Name {
				j = k
			}
		}
		if j < 0 {
			return nil, sandbox.Errorf(sandbox.BadInput, "args."+p.Name, "missing argument %s: expected %s", p.Name, p.Type)
		}
		idx = append(idx, j)
	}
	return idx, nil
}

// convert is fromJSON for parameter p's argument x. Its path names only an
// error, so a scalar's is made only if it fails.
func convert(p wasmcapi.Field, x any) (wasmcapi.Val, error) {
	path := ""
	if p.Type.Kind > wasmcapi.KindString {
		path = "args." + p.Name
	}
	v, err := fromJSON(p.Type, x, path)
	if err != nil && path == "" {
		_, err = fromJSON(p.Type, x, "args."+p.Name)
	}
	return v, err
}

// quickVal converts the commonest scalars — a bool, an integer in range, a
// string — straight from their token into v, with nothing boxed; for
// anything else, errors included, it reports !ok and fromJSON decides.
func quickVal(t *wasmcapi.Type, tok token, v *wasmcapi.Val) bool {
	*v = wasmcapi.Val{Kind: t.Kind}
	switch t.Kind {
	case wasmcapi.KindBool:
		v.Bool = tok.kind == 't'
		return tok.kind == 't' || tok.kind == 'f'
	case wasmcapi.KindString:
		if tok.kind != '"' {
			return false
		}
		v.Str = string(tok.b)
		return true
	case wasmcapi.KindU8, wasmcapi.KindU16, wasmcapi.KindU32, wasmcapi.KindU64:
		u, ok := decimal(tok)
		v.Uint = u
		return ok && u <= math.MaxUint64>>(64-intBits(t.Kind))
	case wasmcapi.KindS8, wasmcapi.KindS16, wasmcapi.KindS32, wasmcapi.KindS64:
		neg := tok.kind == 'n' && len(tok.b) > 1 && tok.b[0] == '-'
		if neg {
			tok.b = tok.b[1:]
		}
		u, ok := decimal(tok)
		limit := uint64(1) << (intBits(t.Kind) - 1) // -limit .. limit-1
		if neg {
			v.Int = -int64(u)
			return ok && u <= limit
		}
		v.Int = int64(u)
		return ok && u < limit
	}
	return false
}

// decimal reads a number token of decimal digits alone (no sign, fraction
// or exponent) that fits in 64 bits.
func decimal(tok token) (uint64, bool) {
	if tok.kind != 'n' || len(tok.b) == 0 || len(tok.b) > 20 {
		return 0, false
	}
	var u uint64
	for _, c := range tok.b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if u > (math.MaxUint64-d)/10 {
			return 0, false
		}
		u = u*10 + d
	}
	return u, true
}

// decoded is what Args' general path read: names[i] is values[i]'s key
// (none for an array; sorted).
type decoded struct {
	array  bool
	names  []string
	values []any
}

// decodeArgs is Args' general path: any JSON, numbers kept exact.
func decodeArgs(ft *wasmcapi.FuncType, raw json.RawMessage) (decoded, error) {
	var f decoded
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

// intBits is an integer kind's width.
func intBits(k wasmcapi.Kind) int {
	switch k {
	case wasmcapi.KindS8, wasmcapi.KindU8:
		return 8
	case wasmcapi.KindS16, wasmcapi.KindU16:
		return 16
	case wasmcapi.KindS32, wasmcapi.KindU32:
		return 32
	}
	return 64
}

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
		i, err := strconv.ParseInt(string(n), 10, intBits(t.Kind))
		if err != nil {
			return bad()
		}
		v.Int = i
	case wasmcapi.KindU8, wasmcapi.KindU16, wasmcapi.KindU32, wasmcapi.KindU64:
		n, ok := x.(json.Number)
		if !ok {
			return bad()
		}
		u, err := strconv.ParseUint(string(n), 10, intBits(t.Kind))
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
