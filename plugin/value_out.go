package plugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/wovyr/wovyr/internal/wasmcapi"
)

// Value writes v, a value of type t, in the JSON form Args reads (see
// value_in.go), with record fields in their WIT order.
func Value(t *wasmcapi.Type, v *wasmcapi.Val) (json.RawMessage, error) {
	if v.Kind == t.Kind { // the common results, without a buffer
		switch t.Kind {
		case wasmcapi.KindS8, wasmcapi.KindS16, wasmcapi.KindS32, wasmcapi.KindS64:
			return strconv.AppendInt(make([]byte, 0, 20), v.Int, 10), nil
		case wasmcapi.KindU8, wasmcapi.KindU16, wasmcapi.KindU32, wasmcapi.KindU64:
			return strconv.AppendUint(make([]byte, 0, 20), v.Uint, 10), nil
		}
	}
	var b bytes.Buffer
	if err := writeJSON(&b, t, v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func writeJSON(b *bytes.Buffer, t *wasmcapi.Type, v *wasmcapi.Val) error {
	if v.Kind != t.Kind {
		return fmt.Errorf("plugin: a %s value for type %s", v.Kind, t)
	}
	switch t.Kind {
	case wasmcapi.KindBool:
		b.WriteString(strconv.FormatBool(v.Bool))
	case wasmcapi.KindS8, wasmcapi.KindS16, wasmcapi.KindS32, wasmcapi.KindS64:
		b.WriteString(strconv.FormatInt(v.Int, 10))
	case wasmcapi.KindU8, wasmcapi.KindU16, wasmcapi.KindU32, wasmcapi.KindU64:
		b.WriteString(strconv.FormatUint(v.Uint, 10))
	case wasmcapi.KindF32, wasmcapi.KindF64:
		bits := 64
		if t.Kind == wasmcapi.KindF32 {
			bits = 32
		}
		switch f := v.Float; {
		case math.IsNaN(f):
			b.WriteString(`"nan"`)
		case math.IsInf(f, 1):
			b.WriteString(`"inf"`)
		case math.IsInf(f, -1):
			b.WriteString(`"-inf"`)
		default:
			b.WriteString(strconv.FormatFloat(f, 'g', -1, bits))
		}
	case wasmcapi.KindChar:
		writeString(b, string(v.Char))
	case wasmcapi.KindString, wasmcapi.KindEnum:
		writeString(b, v.Str)
	case wasmcapi.KindList, wasmcapi.KindTuple:
		if t.Kind == wasmcapi.KindTuple && len(v.Elems) != len(t.Fields) {
			return fmt.Errorf("plugin: a tuple of %d for type %s", len(v.Elems), t)
		}
		b.WriteByte('[')
		for i := range v.Elems {
			if i > 0 {
				b.WriteByte(',')
			}
			et := t.Elem
			if t.Kind == wasmcapi.KindTuple {
				et = t.Fields[i].Type
			}
			if err := writeJSON(b, et, &v.Elems[i]); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case wasmcapi.KindRecord:
		if len(v.Elems) != len(t.Fields) {
			return fmt.Errorf("plugin: a record of %d fields for type %s", len(v.Elems), t)
		}
		b.WriteByte('{')
		for i, f := range t.Fields {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, f.Name)
			b.WriteByte(':')
			if err := writeJSON(b, f.Type, &v.Elems[i]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case wasmcapi.KindVariant:
		var c *wasmcapi.Field
		for i := range t.Fields {
			if t.Fields[i].Name == v.Str {
				c = &t.Fields[i]
			}
		}
		if c == nil || (c.Type == nil) != (v.Payload == nil) {
			return fmt.Errorf("plugin: case %q for type %s", v.Str, t)
		}
		b.WriteString(`{"tag":`)
		writeString(b, v.Str)
		if c.Type != nil {
			b.WriteString(`,"val":`)
			if err := writeJSON(b, c.Type, v.Payload); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case wasmcapi.KindOption:
		if v.Payload == nil {
			b.WriteString("null")
			break
		}
		nested := t.Elem.Kind == wasmcapi.KindOption
		if nested {
			b.WriteString(`{"some":`)
		}
		if err := writeJSON(b, t.Elem, v.Payload); err != nil {
			return err
		}
		if nested {
			b.WriteByte('}')
		}
	case wasmcapi.KindResult:
		pt, key := t.Err, `{"err":`
		if v.Ok {
			pt, key = t.Ok, `{"ok":`
		}
		b.WriteString(key)
		switch {
		case pt == nil && v.Payload == nil:
			b.WriteString("null")
		case pt == nil || v.Payload == nil:
			return fmt.Errorf("plugin: a result payload that does not match type %s", t)
		default:
			if err := writeJSON(b, pt, v.Payload); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case wasmcapi.KindResource:
		b.WriteString(`{"resource":`)
		writeString(b, t.Resource.Name)
		b.WriteString(`,"handle":`)
		b.WriteString(strconv.FormatUint(v.Handle, 10))
		b.WriteByte('}')
	case wasmcapi.KindFlags:
		b.WriteByte('[')
		for i, n := range v.Names {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, n)
		}
		b.WriteByte(']')
	default:
		return fmt.Errorf("plugin: results of type %s cannot be written as JSON yet", t)
	}
	return nil
}

func writeString(b *bytes.Buffer, s string) {
	q, _ := json.Marshal(s) // cannot fail for a string
	b.Write(q)
}
