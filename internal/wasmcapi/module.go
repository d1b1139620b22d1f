package wasmcapi

/*
#include "run.h"
*/
import "C"

import (
	"errors"
	"runtime"
	"sync"
	"unsafe"
)

// Module is a compiled module. It is safe for concurrent use.
type Module struct {
	ptr  *C.wasmtime_module_t
	once sync.Once
}

// Validate checks that wasm is a valid module for e without compiling it.
func (e *Engine) Validate(wasm []byte) error {
	if len(wasm) == 0 {
		return errors.New("empty module")
	}
	if err := checkMagic(wasm); err != nil {
		return err
	}
	err := errorOf(C.wasmtime_module_validate(e.ptr, bytesPtr(wasm), C.size_t(len(wasm))))
	runtime.KeepAlive(wasm)
	return err
}

// Compile validates and compiles wasm.
func (e *Engine) Compile(wasm []byte) (*Module, error) {
	if len(wasm) == 0 {
		return nil, errors.New("empty module")
	}
	if err := checkMagic(wasm); err != nil {
		return nil, err
	}
	var m *C.wasmtime_module_t
	err := errorOf(C.wasmtime_module_new(e.ptr, bytesPtr(wasm), C.size_t(len(wasm)), &m))
	runtime.KeepAlive(wasm)
	if err != nil {
		return nil, err
	}
	return &Module{ptr: m}, nil
}

// Deserialize loads a module that Serialize produced with an engine of the
// same configuration and version.
//
// # Safety
//
// The bytes are machine code that will run in this process: Wasmtime checks
// the header (version, engine flags) but not the code. Callers must only pass
// bytes whose integrity they have verified (the backend's cache checks the
// artifact's digest first, internal/artifact).
func (e *Engine) Deserialize(b []byte) (*Module, error) {
	if len(b) == 0 {
		return nil, errors.New("empty artifact")
	}
	var m *C.wasmtime_module_t
	err := errorOf(C.wasmtime_module_deserialize(e.ptr, bytesPtr(b), C.size_t(len(b)), &m))
	runtime.KeepAlive(b)
	if err != nil {
		return nil, err
	}
	return &Module{ptr: m}, nil
}

// Serialize returns the compiled artifact for a later Deserialize.
func (m *Module) Serialize() ([]byte, error) {
	var v C.wasm_byte_vec_t
	if err := errorOf(C.wasmtime_module_serialize(m.ptr, &v)); err != nil {
		return nil, err
	}
	out := C.GoBytes(unsafe.Pointer(v.data), C.int(v.size))
	C.wasm_byte_vec_delete(&v)
	return out, nil
}

// Import names one thing a module imports.
type Import struct{ Module, Name string }

// Imports lists what m imports, in the module's order.
func (m *Module) Imports() []Import {
	var v C.wasm_importtype_vec_t
	C.wasmtime_module_imports(m.ptr, &v)
	defer C.wasm_importtype_vec_delete(&v)
	if v.size == 0 {
		return nil
	}
	name := func(n *C.wasm_name_t) string { return C.GoStringN(n.data, C.int(n.size)) }
	out := make([]Import, v.size)
	for i, t := range unsafe.Slice(v.data, v.size) {
		out[i] = Import{Module: name(C.wasm_importtype_module(t)), Name: name(C.wasm_importtype_name(t))}
	}
	runtime.KeepAlive(m)
	return out
}

// Close frees the module; instances and InstancePres made from it keep
// their own references. It is idempotent.
func (m *Module) Close() {
	m.once.Do(func() { C.wasmtime_module_delete(m.ptr) })
}

// InstancePre is a module type-checked and linked against WASI preview1
// once; each Run instantiates it afresh. It is safe for concurrent use.
type InstancePre struct {
	engine *Engine
	ptr    *C.wasmtime_instance_pre_t
	once   sync.Once
}

// Prelink links m against WASI preview1 (and nothing else: a module that
// imports anything more fails here, before anything runs).
func (e *Engine) Prelink(m *Module) (*InstancePre, error) {
	l := C.wasmtime_linker_new(e.ptr)
	defer C.wasmtime_linker_delete(l)
	if err := errorOf(C.wasmtime_linker_define_wasi(l)); err != nil {
		return nil, err
	}
	var p *C.wasmtime_instance_pre_t
	if err := errorOf(C.wasmtime_linker_instantiate_pre(l, m.ptr, &p)); err != nil {
		return nil, err
	}
	return &InstancePre{engine: e, ptr: p}, nil
}

// Close frees the InstancePre. The caller must ensure no Run is in flight.
func (p *InstancePre) Close() {
	p.once.Do(func() { C.wasmtime_instance_pre_delete(p.ptr) })
}
