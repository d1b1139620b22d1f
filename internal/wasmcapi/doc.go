// Package wasmcapi is wovyr's thin cgo layer over the Wasmtime C API that is
// bundled, as a static library, with github.com/bytecodealliance/wasmtime-go/v39.
// It is the only package in wovyr that imports "C".
//
// # Why our own layer
//
// The Go wrapper does not expose the pooling instance allocator, pre-linked
// instantiation (InstancePre) or custom WASI stdio sinks, all of which the C
// library has. Each invocation here needs exactly those: a fresh instance from
// the pool (copy-on-write memory images), made from an InstancePre that was
// type-checked and linked once, with stdout/stderr captured into capped
// buffers. The whole invocation (store, limits, WASI, instantiate, _start,
// classification) is one C function in run.c, so the hot path crosses cgo
// once.
//
// The layer declares the C functions it uses in capi.h instead of including
// the wrapper's headers (cgo cannot name another module's directory);
// TestHeaderMatches compiles capi.h against the real headers so a version
// bump that changes a prototype or a layout fails loudly. The static library
// itself is linked through the blank import of the Go wrapper.
//
// What it refuses to do: it keeps no global state, starts no goroutines and
// knows nothing of wovyr's contract; limits, caching and classification into
// error classes live in package backend/wasm.
package wasmcapi
