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
// Components (the WebAssembly component model) go the same way: compile,
// serialize and deserialize, read the imports and the exported functions'
// WIT types once at load, and make each call one C function (component.c)
// that decodes the arguments into Wasmtime's values, calls, and encodes the
// result, with fuel and the epoch deadline as for core modules. Values cross
// cgo in a small binary codec rather than as C structs built from Go, so a
// call allocates on the C side only what Wasmtime will free itself.
// Resources a call returns stay in the instance's table on the C side; Go
// sees numbered handles (component_resource.go).
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
