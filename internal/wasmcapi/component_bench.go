package wasmcapi

/*
#include <stdlib.h>
#include "component.h"
*/
import "C"

import (
	"errors"
	"time"
	"unsafe"
)

// RawMode says what RawLoop measures.
type RawMode int

// The raw loops.
const (
	RawInstantiate RawMode = 0 // a fresh store and instance per iteration
	RawCall        RawMode = 1 // f(40, 2) on one instance; f takes (u32, u32) -> u32
)

// RawLoop is the benchmarks' floor: the bare Wasmtime C API in a C loop,
// n iterations, with no codec and no cgo crossing per iteration. It
// returns each iteration's duration. Nothing but benchmarks uses it.
func (l *Linker) RawLoop(c *Component, f *Export, mode RawMode, n int) ([]time.Duration, error) {
	if n <= 0 {
		return nil, nil
	}
	ns := (*C.uint64_t)(C.calloc(C.size_t(n), 8))
	defer C.free(unsafe.Pointer(ns))
	var idx *C.wasmtime_component_export_index_t
	if f != nil {
		idx = f.idx
	}
	if C.wovyr_bench_raw(l.engine.ptr, l.ptr, c.ptr, idx, C.int(mode), C.size_t(n), ns) != 0 {
		return nil, errors.New("wasmcapi: raw loop failed")
	}
	out := make([]time.Duration, n)
	for i, v := range unsafe.Slice(ns, n) {
		out[i] = time.Duration(v)
	}
	return out, nil
}
