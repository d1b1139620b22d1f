// component.h: a component instance in its own store, and one call on it
// in one C function, so a call crosses cgo once.
#ifndef WOVYR_COMPONENT_H
#define WOVYR_COMPONENT_H
#include "capi_component.h"

// How a call ended.
enum {
  WOVYR_CEND_OK = 0,
  WOVYR_CEND_TRAP = 1,      // the guest trapped or a host call failed
  WOVYR_CEND_TIMEOUT = 2,   // the wall deadline passed (epoch callback)
  WOVYR_CEND_CANCELLED = 3, // the caller cancelled (epoch callback)
  WOVYR_CEND_OUT_OF_FUEL = 4,
  WOVYR_CEND_NO_FUNC = 5,   // the export is not a function of this instance
  WOVYR_CEND_BAD_ARGS = 6,  // the encoded arguments did not decode
};

typedef struct wovyr_cinst {
  wasmtime_store_t *store;
  wasmtime_context_t *ctx;
  wasmtime_component_instance_t inst;
  uint64_t deadline_mono_ns; // 0: none
  int cancel;                // set (atomically) by Go
  int end;                   // set by the epoch callback or a host call
  uintptr_t host;            // the Go instance's handle for host calls; 0: none
  // The resources the host holds, by slot (NULL: a free slot): what the
  // instance's calls returned, until a call takes them or they are dropped.
  wasmtime_component_resource_any_t **res;
  uint32_t nres, capres;
  // The function the last call looked up (last_func NULL: none).
  const wasmtime_component_export_index_t *last_func;
  wasmtime_component_func_t last_f;
} wovyr_cinst;

// WOVYR_MAX_HANDLES bounds the resources the host holds for one instance.
#define WOVYR_MAX_HANDLES 1024

typedef struct wovyr_ccall {
  // Inputs.
  const wasmtime_component_export_index_t *func;
  size_t args_len, nargs; // the encoded arguments' bytes, and how many values
  int has_result;
  uint64_t fuel;    // 0: unmetered
  uint64_t wall_ns; // 0: no deadline
  // Outputs.
  int end;
  uint64_t fuel_used, call_ns;
  uint8_t *result; // malloc'd encoded result when it did not fit in out
  size_t result_len;
  char *message; // malloc'd, may be NULL
} wovyr_ccall;

// wovyr_cinst_new instantiates component in a fresh store with the given
// limits. wasi gives the store an empty WASI context (no args, env, stdio
// or preopens) for linkers that define WASI interfaces. On failure it
// returns NULL and sets *message (malloc'd).
wovyr_cinst *wovyr_cinst_new(wasm_engine_t *engine, const wasmtime_component_linker_t *linker,
                             const wasmtime_component_t *component, int64_t memory_limit,
                             int64_t table_limit, int wasi, uintptr_t host, char **message);
void wovyr_cinst_delete(wovyr_cinst *c);
// wovyr_cinst_call decodes args (nargs values in the codec of component.c)
// and calls. An encoded result that fits in out (out_cap bytes) is written
// there, else to call->result. The caller owns call, args and out (Go
// memory: C keeps no pointer to them).
void wovyr_cinst_call(wovyr_cinst *c, wovyr_ccall *call, const uint8_t *args, uint8_t *out, size_t out_cap);

// wovyr_cinst_drop drops the resource in slot (running the guest's
// destructor under call's fuel and deadline, whose end it sets) and frees
// the slot. A slot that holds nothing ends WOVYR_CEND_BAD_ARGS.
void wovyr_cinst_drop(wovyr_cinst *c, wovyr_ccall *call, uint32_t slot);

// wovyr_linker_define defines interface iface (iface_len bytes) in linker
// with n functions: names holds their names back to back, name_lens their
// lengths, and ids the Go handles wovyrHostCall is called with. It returns
// NULL, or a malloc'd message.
char *wovyr_linker_define(wasmtime_component_linker_t *linker, const char *iface, size_t iface_len,
                          size_t n, const char *names, const size_t *name_lens, const uintptr_t *ids);

// wovyr_cval_roundtrip decodes n encoded values into Wasmtime values and
// encodes them again: the codec's own test, with Wasmtime's allocator.
int wovyr_cval_roundtrip(const uint8_t *in, size_t len, size_t n, uint8_t **out, size_t *out_len);

int wovyr_bench_raw(wasm_engine_t *engine, const wasmtime_component_linker_t *linker,
                    const wasmtime_component_t *component, const wasmtime_component_export_index_t *func,
                    int mode, size_t n, uint64_t *ns);
#endif
