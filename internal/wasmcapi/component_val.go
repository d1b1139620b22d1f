package wasmcapi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Val is a component-model value. Which fields hold it depends on Kind:
//
//	bool: Bool; s8–s64: Int; u8–u64: Uint; f32, f64: Float; char: Char
//	string: Str; enum: Str (the case)
//	list, tuple: Elems; record: Elems with Names (field names, in type order)
//	variant: Str (the case) and Payload (nil when the case has none)
//	option: Payload (nil: none)
//	result: Ok, and Payload (nil when that case has none)
//	flags: Names (the flags that are set)
//	resource: Handle, the instance's name for the resource (component_resource.go)
//
// A list<u8> may be held in Bytes instead of Elems: host functions return
// bodies that way, and their list<u8> arguments arrive that way, so a
// megabyte is not a million Vals.
type Val struct {
	Kind    Kind
	Bool    bool
	Int     int64
	Uint    uint64
	Float   float64
	Char    rune
	Str     string
	Elems   []Val
	Names   []string
	Payload *Val
	Ok      bool
	Bytes   []byte
	Handle  uint64
}

// ListBytes returns a list<u8>'s bytes, from Bytes or from Elems.
func (v *Val) ListBytes() []byte {
	if v.Bytes != nil || len(v.Elems) == 0 {
		return v.Bytes
	}
	b := make([]byte, len(v.Elems))
	for i := range v.Elems {
		b[i] = byte(v.Elems[i].Uint)
	}
	return b
}

// encodeVals writes vals in component.c's codec. Resources are the
// handles of in (nil where there can be none: host calls).
func encodeVals(buf []byte, vals []Val, in *Instance) []byte {
	for i := range vals {
		buf = encodeVal(buf, &vals[i], in)
	}
	return buf
}

func encodeVal(b []byte, v *Val, in *Instance) []byte {
	b = append(b, byte(v.Kind))
	switch v.Kind {
	case KindBool:
		if v.Bool {
			return append(b, 1)
		}
		return append(b, 0)
	case KindS8:
		return append(b, byte(int8(v.Int)))
	case KindU8:
		return append(b, byte(v.Uint))
	case KindS16:
		return binary.LittleEndian.AppendUint16(b, uint16(int16(v.Int)))
	case KindU16:
		return binary.LittleEndian.AppendUint16(b, uint16(v.Uint))
	case KindS32:
		return binary.LittleEndian.AppendUint32(b, uint32(int32(v.Int)))
	case KindU32:
		return binary.LittleEndian.AppendUint32(b, uint32(v.Uint))
	case KindS64:
		return binary.LittleEndian.AppendUint64(b, uint64(v.Int))
	case KindU64:
		return binary.LittleEndian.AppendUint64(b, v.Uint)
	case KindF32:
		return binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(v.Float)))
	case KindF64:
		return binary.LittleEndian.AppendUint64(b, math.Float64bits(v.Float))
	case KindChar:
		return binary.LittleEndian.AppendUint32(b, uint32(v.Char))
	case KindString, KindEnum:
		return appendName(b, v.Str)
	case KindList, KindTuple:
		if v.Bytes != nil {
			b = binary.LittleEndian.AppendUint32(b, uint32(len(v.Bytes)))
			for _, c := range v.Bytes {
				b = append(b, byte(KindU8), c)
			}
			return b
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(len(v.Elems)))
		for i := range v.Elems {
			b = encodeVal(b, &v.Elems[i], in)
		}
		return b
	case KindRecord:
		b = binary.LittleEndian.AppendUint32(b, uint32(len(v.Elems)))
		for i := range v.Elems {
			b = appendName(b, v.Names[i])
			b = encodeVal(b, &v.Elems[i], in)
		}
		return b
	case KindVariant:
		b = appendName(b, v.Str)
		return appendPayload(b, v.Payload, in)
	case KindOption:
		return appendPayload(b, v.Payload, in)
	case KindResult:
		if v.Ok {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		return appendPayload(b, v.Payload, in)
	case KindFlags:
		b = binary.LittleEndian.AppendUint32(b, uint32(len(v.Names)))
		for _, n := range v.Names {
			b = appendName(b, n)
		}
		return b
	case KindResource:
		h := in.handles[v.Handle] // Call checked it is held
		b = binary.LittleEndian.AppendUint32(b, h.slot)
		if h.moving {
			return append(b, 1)
		}
		return append(b, 0)
	}
	panic(fmt.Sprintf("wasmcapi: cannot encode a %s value", v.Kind)) // callers build vals from types
}

func appendName(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func appendPayload(b []byte, p *Val, in *Instance) []byte {
	if p == nil {
		return append(b, 0)
	}
	return encodeVal(append(b, 1), p, in)
}

var errCodec = errors.New("wasmcapi: malformed encoded value")

type reader struct {
	b     []byte
	bytes bool      // lists of u8 go into Val.Bytes
	in    *Instance // whose table the resources are in; nil: none may come
}

func (r *reader) take(n int) ([]byte, error) {
	if len(r.b) < n {
		return nil, errCodec
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p, nil
}

func (r *reader) u32() (uint32, error) {
	p, err := r.take(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(p), nil
}

func (r *reader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	p, err := r.take(int(n))
	return string(p), err
}

func (r *reader) count() (int, error) {
	n, err := r.u32()
	if err == nil && int(n) > len(r.b) { // every element takes at least one byte
		err = errCodec
	}
	return int(n), err
}

func (r *reader) payload(depth int) (*Val, error) {
	p, err := r.take(1)
	if err != nil || p[0] == 0 {
		return nil, err
	}
	v, err := r.val(depth + 1)
	return &v, err
}

func (r *reader) val(depth int) (Val, error) {
	var v Val
	if depth > 100 {
		return v, errCodec
	}
	k, err := r.take(1)
	if err != nil {
		return v, err
	}
	v.Kind = Kind(k[0])
	var p []byte
	switch v.Kind {
	case KindBool, KindS8, KindU8:
		if p, err = r.take(1); err == nil {
			v.Bool, v.Int, v.Uint = p[0] != 0, int64(int8(p[0])), uint64(p[0])
		}
	case KindS16, KindU16:
		if p, err = r.take(2); err == nil {
			u := binary.LittleEndian.Uint16(p)
			v.Int, v.Uint = int64(int16(u)), uint64(u)
		}
	case KindS32, KindU32, KindF32, KindChar:
		if p, err = r.take(4); err == nil {
			u := binary.LittleEndian.Uint32(p)
			v.Int, v.Uint, v.Float, v.Char = int64(int32(u)), uint64(u), float64(math.Float32frombits(u)), rune(u)
		}
	case KindS64, KindU64, KindF64:
		if p, err = r.take(8); err == nil {
			u := binary.LittleEndian.Uint64(p)
			v.Int, v.Uint, v.Float = int64(u), u, math.Float64frombits(u)
		}
	case KindString, KindEnum:
		v.Str, err = r.name()
	case KindList, KindTuple, KindRecord:
		var n int
		if n, err = r.count(); err != nil {
			return v, err
		}
		if r.bytes && v.Kind == KindList && n > 0 && r.u8s(n) {
			v.Bytes = make([]byte, n)
			for i := range v.Bytes {
				v.Bytes[i] = r.b[2*i+1]
			}
			r.b = r.b[2*n:]
			return v, nil
		}
		v.Elems = make([]Val, n)
		if v.Kind == KindRecord {
			v.Names = make([]string, n)
		}
		for i := 0; i < n && err == nil; i++ {
			if v.Kind == KindRecord {
				if v.Names[i], err = r.name(); err != nil {
					break
				}
			}
			v.Elems[i], err = r.val(depth + 1)
		}
	case KindVariant:
		if v.Str, err = r.name(); err == nil {
			v.Payload, err = r.payload(depth)
		}
	case KindOption:
		v.Payload, err = r.payload(depth)
	case KindResult:
		if p, err = r.take(1); err == nil {
			v.Ok = p[0] != 0
			v.Payload, err = r.payload(depth)
		}
	case KindFlags:
		var n int
		if n, err = r.count(); err != nil {
			return v, err
		}
		v.Names = make([]string, n)
		for i := 0; i < n && err == nil; i++ {
			v.Names[i], err = r.name()
		}
	case KindResource:
		var slot uint32
		if slot, err = r.u32(); err == nil {
			_, err = r.take(1)
		}
		if err == nil && r.in == nil {
			err = errCodec
		}
		if err == nil {
			v.Handle = r.in.hold(slot)
		}
	default:
		err = errCodec
	}
	return v, err
}

// u8s reports whether the next n values are all u8.
func (r *reader) u8s(n int) bool {
	if len(r.b) < 2*n {
		return false
	}
	for i := 0; i < n; i++ {
		if Kind(r.b[2*i]) != KindU8 {
			return false
		}
	}
	return true
}

// decodeVal reads exactly one value; its resources are in's.
func decodeVal(b []byte, in *Instance) (Val, error) {
	r := reader{b: b, in: in}
	v, err := r.val(0)
	if err == nil && len(r.b) != 0 {
		err = errCodec
	}
	return v, err
}
