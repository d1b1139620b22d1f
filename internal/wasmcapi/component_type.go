package wasmcapi

/*
#include "component.h"
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"
)

// Kind is a component-model value kind. The values follow Wasmtime's value
// kinds (WASMTIME_COMPONENT_BOOL …), which the codec writes on the wire;
// the type kinds Wasmtime reports are numbered differently and are mapped
// onto these when a type is read.
type Kind uint8

// The value kinds.
const (
	KindBool Kind = iota
	KindS8
	KindU8
	KindS16
	KindU16
	KindS32
	KindU32
	KindS64
	KindU64
	KindF32
	KindF64
	KindChar
	KindString
	KindList
	KindRecord
	KindTuple
	KindVariant
	KindEnum
	KindOption
	KindResult
	KindFlags
	// KindResource is a handle to a resource: own<R> or borrow<R>
	// (Type.Borrow), of the resource Type.Resource.
	KindResource
	// KindUnsupported stands for the types wovyr cannot map to JSON yet:
	// future, stream, error-context.
	KindUnsupported
)

var kindNames = [...]string{"bool", "s8", "u8", "s16", "u16", "s32", "u32", "s64", "u64",
	"f32", "f64", "char", "string", "list", "record", "tuple", "variant", "enum", "option",
	"result", "flags", "resource", "unsupported"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Field is a named type: a record field, a variant case (Type nil when the
// case has no payload), a tuple member (Name empty) or a parameter.
type Field struct {
	Name string
	Type *Type
}

// Type is a component-model value type, read once at load.
type Type struct {
	Kind   Kind
	Elem   *Type    // list, option
	Fields []Field  // record fields, variant cases, tuple members
	Names  []string // enum cases, flags
	Ok     *Type    // result; nil when the ok case has no payload
	Err    *Type    // result; nil when the error case has no payload
	What   string   // KindUnsupported: which type it is ("stream", …)
	// Resource is a KindResource's resource, and Borrow whether the
	// handle is borrowed (borrow<R>) rather than owned (own<R>).
	Resource *Resource
	Borrow   bool
}

// Resource is a resource type a component exports. Handles of one resource
// share one *Resource.
type Resource struct {
	// Name is the resource's name in its interface ("counter"), from the
	// functions that construct it or take it as self; "resource-N" when
	// none does.
	Name string
}

// String writes the type in WIT syntax, as errors name expected types.
func (t *Type) String() string {
	if t == nil {
		return "_"
	}
	switch t.Kind {
	case KindList:
		return "list<" + t.Elem.String() + ">"
	case KindOption:
		return "option<" + t.Elem.String() + ">"
	case KindResult:
		if t.Ok == nil && t.Err == nil {
			return "result"
		}
		return "result<" + t.Ok.String() + ", " + t.Err.String() + ">"
	case KindTuple:
		parts := make([]string, len(t.Fields))
		for i, f := range t.Fields {
			parts[i] = f.Type.String()
		}
		return "tuple<" + strings.Join(parts, ", ") + ">"
	case KindRecord:
		parts := make([]string, len(t.Fields))
		for i, f := range t.Fields {
			parts[i] = f.Name + ": " + f.Type.String()
		}
		return "record { " + strings.Join(parts, ", ") + " }"
	case KindVariant:
		parts := make([]string, len(t.Fields))
		for i, f := range t.Fields {
			parts[i] = f.Name
			if f.Type != nil {
				parts[i] += "(" + f.Type.String() + ")"
			}
		}
		return "variant { " + strings.Join(parts, ", ") + " }"
	case KindEnum:
		return "enum { " + strings.Join(t.Names, ", ") + " }"
	case KindFlags:
		return "flags { " + strings.Join(t.Names, ", ") + " }"
	case KindResource:
		if t.Borrow {
			return "borrow<" + t.Resource.Name + ">"
		}
		return t.Resource.Name // own<R> is written R in WIT
	case KindUnsupported:
		return t.What
	}
	return t.Kind.String()
}

// FuncType is an exported function's signature.
type FuncType struct {
	Params []Field
	Result *Type // nil: the function returns nothing
}

// valtypeKinds maps Wasmtime's type kinds (types/val.h) onto Kind.
var valtypeKinds = [...]Kind{KindBool, KindS8, KindS16, KindS32, KindS64, KindU8, KindU16,
	KindU32, KindU64, KindF32, KindF64, KindChar, KindString, KindList, KindRecord, KindTuple,
	KindVariant, KindEnum, KindOption, KindResult, KindFlags}

var unsupportedNames = map[int]string{23: "future", 24: "stream", 25: "error-context"}

// typeReader reads a component's types. Wasmtime's resource types compare
// only with each other (wasmtime_component_resource_type_equal), so it keeps
// one of each it met, to give handles of one resource one *Resource.
type typeReader struct {
	rtypes    []*C.wasmtime_component_resource_type_t
	resources []*Resource
}

// resource returns the *Resource of rt, a resource type it does not own.
func (tr *typeReader) resource(rt *C.wasmtime_component_resource_type_t) *Resource {
	for i, seen := range tr.rtypes {
		if C.wasmtime_component_resource_type_equal(seen, rt) {
			return tr.resources[i]
		}
	}
	r := &Resource{}
	tr.rtypes = append(tr.rtypes, C.wasmtime_component_resource_type_clone(rt))
	tr.resources = append(tr.resources, r)
	return r
}

// close frees the resource types kept and names the resources left unnamed.
func (tr *typeReader) close() {
	for i, rt := range tr.rtypes {
		C.wasmtime_component_resource_type_delete(rt)
		if tr.resources[i].Name == "" {
			tr.resources[i].Name = fmt.Sprintf("resource-%d", i)
		}
	}
	tr.rtypes = nil
}

// readType converts and frees a wasmtime_component_valtype_t.
func (tr *typeReader) readType(vt *C.wasmtime_component_valtype_t) *Type {
	defer C.wasmtime_component_valtype_delete(vt)
	k := int(vt.kind)
	if k == C.WOVYR_VALTYPE_OWN || k == C.WOVYR_VALTYPE_BORROW {
		return &Type{Kind: KindResource, Borrow: k == C.WOVYR_VALTYPE_BORROW,
			Resource: tr.resource(*(**C.wasmtime_component_resource_type_t)(unsafe.Pointer(&vt.of)))}
	}
	if k >= len(valtypeKinds) {
		what := unsupportedNames[k]
		if what == "" {
			what = fmt.Sprintf("type(%d)", k)
		}
		return &Type{Kind: KindUnsupported, What: what}
	}
	t := &Type{Kind: valtypeKinds[k]}
	of := unsafe.Pointer(&vt.of)
	var sub C.wasmtime_component_valtype_t
	var name *C.char
	var nlen C.size_t
	switch t.Kind {
	case KindList:
		C.wasmtime_component_list_type_element(*(**C.wasmtime_component_list_type_t)(of), &sub)
		t.Elem = tr.readType(&sub)
	case KindOption:
		C.wasmtime_component_option_type_ty(*(**C.wasmtime_component_option_type_t)(of), &sub)
		t.Elem = tr.readType(&sub)
	case KindResult:
		r := *(**C.wasmtime_component_result_type_t)(of)
		if C.wasmtime_component_result_type_ok(r, &sub) {
			t.Ok = tr.readType(&sub)
		}
		if C.wasmtime_component_result_type_err(r, &sub) {
			t.Err = tr.readType(&sub)
		}
	case KindRecord:
		r := *(**C.wasmtime_component_record_type_t)(of)
		for i := C.size_t(0); i < C.wasmtime_component_record_type_field_count(r); i++ {
			if C.wasmtime_component_record_type_field_nth(r, i, &name, &nlen, &sub) {
				t.Fields = append(t.Fields, Field{Name: C.GoStringN(name, C.int(nlen)), Type: tr.readType(&sub)})
			}
		}
	case KindTuple:
		r := *(**C.wasmtime_component_tuple_type_t)(of)
		for i := C.size_t(0); i < C.wasmtime_component_tuple_type_types_count(r); i++ {
			if C.wasmtime_component_tuple_type_types_nth(r, i, &sub) {
				t.Fields = append(t.Fields, Field{Type: tr.readType(&sub)})
			}
		}
	case KindVariant:
		r := *(**C.wasmtime_component_variant_type_t)(of)
		for i := C.size_t(0); i < C.wasmtime_component_variant_type_case_count(r); i++ {
			var has C.bool
			if C.wasmtime_component_variant_type_case_nth(r, i, &name, &nlen, &has, &sub) {
				f := Field{Name: C.GoStringN(name, C.int(nlen))}
				if has {
					f.Type = tr.readType(&sub)
				}
				t.Fields = append(t.Fields, f)
			}
		}
	case KindEnum:
		r := *(**C.wasmtime_component_enum_type_t)(of)
		for i := C.size_t(0); i < C.wasmtime_component_enum_type_names_count(r); i++ {
			if C.wasmtime_component_enum_type_names_nth(r, i, &name, &nlen) {
				t.Names = append(t.Names, C.GoStringN(name, C.int(nlen)))
			}
		}
	case KindFlags:
		r := *(**C.wasmtime_component_flags_type_t)(of)
		for i := C.size_t(0); i < C.wasmtime_component_flags_type_names_count(r); i++ {
			if C.wasmtime_component_flags_type_names_nth(r, i, &name, &nlen) {
				t.Names = append(t.Names, C.GoStringN(name, C.int(nlen)))
			}
		}
	}
	return t
}

func (tr *typeReader) readFuncType(ft *C.wasmtime_component_func_type_t) *FuncType {
	f := &FuncType{}
	var name *C.char
	var nlen C.size_t
	var vt C.wasmtime_component_valtype_t
	for i := C.size_t(0); i < C.wasmtime_component_func_type_param_count(ft); i++ {
		if C.wasmtime_component_func_type_param_nth(ft, i, &name, &nlen, &vt) {
			f.Params = append(f.Params, Field{Name: C.GoStringN(name, C.int(nlen)), Type: tr.readType(&vt)})
		}
	}
	if C.wasmtime_component_func_type_result(ft, &vt) {
		f.Result = tr.readType(&vt)
	}
	return f
}
