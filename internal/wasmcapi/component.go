package wasmcapi

/*
#include <stdlib.h>
#include "component.h"
*/
import "C"

import (
	"errors"
	"runtime"
	"runtime/cgo"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Component is a compiled component with its exported functions' types,
// read once. It is safe for concurrent use.
type Component struct {
	engine    *Engine
	ptr       *C.wasmtime_component_t
	imports   []string
	funcs     map[string]*Export
	resources []ExportedResource
	// nextHandle numbers the resource handles of all its instances.
	nextHandle atomic.Uint64
	once       sync.Once
}

// ExportedResource is a resource of an exported interface.
type ExportedResource struct {
	Iface    string // "wovyr:test/counters"; empty at the component's top level
	Resource *Resource
}

// Export is one exported function: its signature and the index that finds
// it in any instance of the component without a name look-up.
type Export struct {
	Name string // "add", or "iface#func" for a function of an exported interface
	Type *FuncType
	idx  *C.wasmtime_component_export_index_t
	// resources says a parameter can hold a resource handle.
	resources bool
}

// IsComponent reports whether b is a component rather than a core module
// (the header's layer field, https://github.com/WebAssembly/component-model).
func IsComponent(b []byte) bool {
	return len(b) >= 8 && string(b[:4]) == "\x00asm" && b[6] == 1 && b[7] == 0
}

// CompileComponent validates and compiles a component. The engine must
// have been made with ComponentSlots > 0 to instantiate it.
func (e *Engine) CompileComponent(wasm []byte) (*Component, error) {
	if err := checkMagic(wasm); err != nil {
		return nil, err
	}
	if !IsComponent(wasm) {
		return nil, &Error{Msg: "not a WebAssembly component: it is a core module (wrap it with `jco new` or `wasm-tools component new`)"}
	}
	var c *C.wasmtime_component_t
	err := errorOf(C.wasmtime_component_new(e.ptr, bytesPtr(wasm), C.size_t(len(wasm)), &c))
	runtime.KeepAlive(wasm)
	if err != nil {
		return nil, err
	}
	return e.component(c)
}

// DeserializeComponent loads a component that Component.Serialize produced
// with an engine of the same configuration and version.
//
// # Safety
//
// As for Deserialize: the bytes are machine code; callers must verify their
// integrity first.
func (e *Engine) DeserializeComponent(b []byte) (*Component, error) {
	if len(b) == 0 {
		return nil, errors.New("empty artifact")
	}
	var c *C.wasmtime_component_t
	err := errorOf(C.wasmtime_component_deserialize(e.ptr, bytesPtr(b), C.size_t(len(b)), &c))
	runtime.KeepAlive(b)
	if err != nil {
		return nil, err
	}
	return e.component(c)
}

// DeserializeComponentFile is DeserializeComponent for an artifact in a
// file, which Wasmtime maps instead of copying.
//
// # Safety
//
// The mapping is the code that runs: the file must be verified and must
// not change while the component lives (a sealed memfd, as
// artifact.OpenSealed returns, cannot).
func (e *Engine) DeserializeComponentFile(path string) (*Component, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var c *C.wasmtime_component_t
	if err := errorOf(C.wasmtime_component_deserialize_file(e.ptr, cpath, &c)); err != nil {
		return nil, err
	}
	return e.component(c)
}

// component reads the imports and the exported functions' types.
func (e *Engine) component(ptr *C.wasmtime_component_t) (*Component, error) {
	c := &Component{engine: e, ptr: ptr, funcs: map[string]*Export{}}
	tr := &typeReader{}
	defer tr.close()
	ty := C.wasmtime_component_type(ptr)
	defer C.wasmtime_component_type_delete(ty)
	var name *C.char
	var nlen C.size_t
	var item C.wasmtime_component_item_t
	for i := C.size_t(0); i < C.wasmtime_component_type_import_count(ty, e.ptr); i++ {
		if C.wasmtime_component_type_import_nth(ty, e.ptr, i, &name, &nlen, &item) {
			c.imports = append(c.imports, C.GoStringN(name, C.int(nlen)))
			C.wasmtime_component_item_delete(&item)
		}
	}
	for i := C.size_t(0); i < C.wasmtime_component_type_export_count(ty, e.ptr); i++ {
		if !C.wasmtime_component_type_export_nth(ty, e.ptr, i, &name, &nlen, &item) {
			continue
		}
		n := C.GoStringN(name, C.int(nlen))
		switch item.kind {
		case C.WOVYR_ITEM_COMPONENT_FUNC:
			c.addFunc(tr, nil, n, n, *(**C.wasmtime_component_func_type_t)(unsafe.Pointer(&item.of)))
		case C.WOVYR_ITEM_COMPONENT_INSTANCE:
			c.addInstance(tr, n, *(**C.wasmtime_component_instance_type_t)(unsafe.Pointer(&item.of)))
		}
		C.wasmtime_component_item_delete(&item)
	}
	sort.Strings(c.imports)
	c.nameResources()
	return c, nil
}

// nameResources names each resource after the functions that construct it
// or take it as self ("[constructor]counter", "[method]counter.incr"), as
// the component model names them, and lists those it named.
func (c *Component) nameResources() {
	for _, f := range c.Funcs() {
		iface, name := "", f.Name
		if i := strings.LastIndexByte(name, '#'); i >= 0 {
			iface, name = name[:i], name[i+1:]
		}
		var r *Resource
		switch {
		case strings.HasPrefix(name, "[constructor]") && f.Type.Result != nil && f.Type.Result.Kind == KindResource:
			r, name = f.Type.Result.Resource, strings.TrimPrefix(name, "[constructor]")
		case strings.HasPrefix(name, "[method]") && len(f.Type.Params) > 0 && f.Type.Params[0].Type.Kind == KindResource:
			r, name = f.Type.Params[0].Type.Resource, strings.TrimPrefix(name, "[method]")
			name, _, _ = strings.Cut(name, ".")
		}
		if r != nil && r.Name == "" {
			r.Name = name
			c.resources = append(c.resources, ExportedResource{Iface: iface, Resource: r})
		}
	}
}

// Resources lists the resources the component's exported functions
// construct or take as self, in the order of those functions' names.
func (c *Component) Resources() []ExportedResource {
	return append([]ExportedResource(nil), c.resources...)
}

// addInstance adds the functions of an exported interface as "iface#func".
func (c *Component) addInstance(tr *typeReader, iface string, it *C.wasmtime_component_instance_type_t) {
	in := C.CString(iface)
	defer C.free(unsafe.Pointer(in))
	parent := C.wasmtime_component_get_export_index(c.ptr, nil, in, C.size_t(len(iface)))
	if parent == nil {
		return
	}
	defer C.wasmtime_component_export_index_delete(parent)
	var name *C.char
	var nlen C.size_t
	var item C.wasmtime_component_item_t
	for i := C.size_t(0); i < C.wasmtime_component_instance_type_export_count(it, c.engine.ptr); i++ {
		if !C.wasmtime_component_instance_type_export_nth(it, c.engine.ptr, i, &name, &nlen, &item) {
			continue
		}
		if item.kind == C.WOVYR_ITEM_COMPONENT_FUNC {
			n := C.GoStringN(name, C.int(nlen))
			c.addFunc(tr, parent, iface+"#"+n, n, *(**C.wasmtime_component_func_type_t)(unsafe.Pointer(&item.of)))
		}
		C.wasmtime_component_item_delete(&item)
	}
}

func (c *Component) addFunc(tr *typeReader, parent *C.wasmtime_component_export_index_t, full, name string, ft *C.wasmtime_component_func_type_t) {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	idx := C.wasmtime_component_get_export_index(c.ptr, parent, cn, C.size_t(len(name)))
	if idx == nil {
		return
	}
	e := &Export{Name: full, Type: tr.readFuncType(ft), idx: idx}
	for _, p := range e.Type.Params {
		e.resources = e.resources || HasResource(p.Type)
	}
	c.funcs[full] = e
}

// Imports names the component's imports ("wasi:random/random@0.2.0", …),
// sorted: what it needs linked before it can be instantiated.
func (c *Component) Imports() []string { return append([]string(nil), c.imports...) }

// Func returns the exported function name ("add", "iface#func").
func (c *Component) Func(name string) (*Export, bool) {
	f, ok := c.funcs[name]
	return f, ok
}

// Funcs returns every exported function, sorted by name.
func (c *Component) Funcs() []*Export {
	out := make([]*Export, 0, len(c.funcs))
	for _, f := range c.funcs {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Serialize returns the compiled artifact for a later DeserializeComponent.
func (c *Component) Serialize() ([]byte, error) {
	var v C.wasm_byte_vec_t
	if err := errorOf(C.wasmtime_component_serialize(c.ptr, &v)); err != nil {
		return nil, err
	}
	out := C.GoBytes(unsafe.Pointer(v.data), C.int(v.size))
	C.wasm_byte_vec_delete(&v)
	return out, nil
}

// Close frees the component. The caller must ensure no instance made from
// it is still in use. It is idempotent.
func (c *Component) Close() {
	c.once.Do(func() {
		for _, f := range c.funcs {
			C.wasmtime_component_export_index_delete(f.idx)
		}
		C.wasmtime_component_delete(c.ptr)
	})
}

// Linker resolves a component's imports. It is safe for concurrent use
// once made.
type Linker struct {
	engine  *Engine
	ptr     *C.wasmtime_component_linker_t
	wasi    bool
	hosts   bool         // Define was called: instances carry a context for host calls
	handles []cgo.Handle // the defined HostFuncs
	once    sync.Once
}

// NewLinker makes a linker that defines nothing, or, with wasip2, every
// WASI 0.2 interface Wasmtime implements. Wasmtime links WASI as a whole;
// callers that grant less must refuse, before instantiation, a component
// that imports what they did not grant (package plugin does).
func (e *Engine) NewLinker(wasip2 bool) (*Linker, error) {
	l := &Linker{engine: e, ptr: C.wasmtime_component_linker_new(e.ptr), wasi: wasip2}
	if wasip2 {
		if err := errorOf(C.wasmtime_component_linker_add_wasip2(l.ptr)); err != nil {
			l.Close()
			return nil, err
		}
	}
	return l, nil
}

// Close frees the linker. It is idempotent.
func (l *Linker) Close() {
	l.once.Do(func() {
		C.wasmtime_component_linker_delete(l.ptr)
		for _, h := range l.handles {
			h.Delete()
		}
	})
}
