package wasmcapi

/*
#include <stdlib.h>
#include "component.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime/cgo"
	"sort"
	"unsafe"
)

// HostFunc implements a function that components import, for every
// instance of a linker. ctx is the context of the Call the guest made it
// from (context.Background while instantiating); args match the import's
// parameter types, which the component model has checked (a list<u8>
// arrives in Val.Bytes). It returns the
// import's result (nil when the function has none), of the import's result
// type: Wasmtime checks it, and a mismatch traps the guest.
//
// A non-nil error traps the guest with the error's text as the message and
// poisons its instance. An error that is (or wraps) ctx's deadline or
// cancellation ends the call as CallTimeout or CallCancelled instead of
// CallTrap, so a host call that waits on the network is bounded by the
// call's own limits.
type HostFunc func(ctx context.Context, args []Val) (*Val, error)

// Define defines the interface iface ("wovyr:host/kv@0.1.0") with funcs,
// by their names within it, for every instance the linker makes. Call it
// before the linker instantiates anything; an interface may be defined once.
func (l *Linker) Define(iface string, funcs map[string]HostFunc) error {
	names := make([]string, 0, len(funcs))
	for n := range funcs {
		names = append(names, n)
	}
	sort.Strings(names)
	var all []byte
	lens := make([]C.size_t, len(names))
	ids := make([]C.uintptr_t, len(names))
	for i, n := range names {
		all = append(all, n...)
		lens[i] = C.size_t(len(n))
		h := cgo.NewHandle(funcs[n])
		l.handles = append(l.handles, h)
		ids[i] = C.uintptr_t(h)
	}
	all = append(all, 0) // never empty
	ci := C.CString(iface)
	defer C.free(unsafe.Pointer(ci))
	var lensp *C.size_t
	var idsp *C.uintptr_t
	if len(names) > 0 {
		lensp, idsp = &lens[0], &ids[0]
	}
	msg := C.wovyr_linker_define(l.ptr, ci, C.size_t(len(iface)), C.size_t(len(names)),
		(*C.char)(unsafe.Pointer(&all[0])), lensp, idsp)
	if msg != nil {
		defer C.free(unsafe.Pointer(msg))
		return fmt.Errorf("wasmcapi: define %s: %s", iface, C.GoString(msg))
	}
	l.hosts = true
	return nil
}

// instHost is what a host call finds of the instance that made it.
type instHost struct {
	ctx context.Context
}

//export wovyrHostCall
func wovyrHostCall(fn, inst C.uintptr_t, args *C.uint8_t, argsLen C.size_t, out **C.uint8_t, outLen *C.size_t, msg **C.char) (end C.int) {
	// A panic must not unwind through Wasmtime's frames: it traps instead.
	defer func() {
		if p := recover(); p != nil {
			*msg = C.CString(fmt.Sprintf("wovyr: host function panicked: %v", p))
			end = C.WOVYR_CEND_TRAP
		}
	}()
	f := cgo.Handle(fn).Value().(HostFunc)
	ctx := context.Background()
	if inst != 0 {
		if c := cgo.Handle(inst).Value().(*instHost).ctx; c != nil {
			ctx = c
		}
	}
	var vals []Val
	if argsLen > 0 {
		r := reader{b: unsafe.Slice((*byte)(unsafe.Pointer(args)), int(argsLen)), bytes: true}
		for len(r.b) > 0 {
			v, err := r.val(0)
			if err != nil {
				*msg = C.CString("wovyr: a host call's arguments did not decode")
				return C.WOVYR_CEND_TRAP
			}
			vals = append(vals, v)
		}
	}
	res, err := f(ctx, vals)
	if err != nil {
		*msg = C.CString(oneLine(err.Error()))
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return C.WOVYR_CEND_TIMEOUT
		case errors.Is(err, context.Canceled):
			return C.WOVYR_CEND_CANCELLED
		}
		return C.WOVYR_CEND_TRAP
	}
	if res != nil {
		enc := encodeVal(nil, res, nil)
		*out = (*C.uint8_t)(C.CBytes(enc))
		*outLen = C.size_t(len(enc))
	}
	return C.WOVYR_CEND_OK
}
