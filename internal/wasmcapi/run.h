// run.h: one invocation in one C call, so the hot path crosses cgo once.
#ifndef WOVYR_RUN_H
#define WOVYR_RUN_H
#include "capi.h"

// How an invocation ended.
enum {
  WOVYR_END_EXIT = 0,        // _start returned (code 0) or proc_exit(code)
  WOVYR_END_TRAP = 1,        // a wasm trap; trap_code says which
  WOVYR_END_TIMEOUT = 2,     // the wall deadline passed (epoch callback)
  WOVYR_END_CANCELLED = 3,   // the caller cancelled (epoch callback)
  WOVYR_END_INSTANTIATE = 4, // instantiation failed (pool exhausted, limits)
  WOVYR_END_NO_START = 5,    // the module exports no _start function
  WOVYR_END_HOST_ERROR = 6,  // a host error that is not an exit
  WOVYR_END_SETUP = 7,       // WASI setup failed (argv, env, preopen)
};

typedef struct wovyr_buf {
  char *data;
  size_t len, cap, limit;
  int truncated;
} wovyr_buf;

typedef struct wovyr_run {
  // Inputs. blob holds argc argv strings, then envc KEY=VALUE strings, then
  // npre (host, guest) path pairs, each NUL-terminated.
  const char *blob;
  size_t argc, envc, npre;
  const int *pre_write; // per preopen: 1 read-write, 0 read-only
  const char *stdin_data;
  size_t stdin_len;
  uint64_t fuel;         // 0: unmetered
  int64_t memory_limit;  // bytes, per store; <0: unlimited
  int64_t table_limit;   // elements; <0: unlimited
  uint64_t wall_ns;      // deadline from start; 0: none (controls only)
  size_t output_limit;   // bytes kept per stream
  int inherit_stdio;     // runner: pass the process's stdio through
  int inherit_env;       // weakened controls only
  int cancel;            // set (atomically) by Go to stop at the next tick

  // Outputs.
  int end, exit_code, trap_code;
  uint64_t fuel_used;
  size_t memory_size;
  uint64_t deadline_mono_ns, instantiate_ns, ended_ns; // monotonic clock
  uint64_t t0_ns;    // monotonic, entry
  uint64_t start_ns; // monotonic, just before _start is called
  char *message;     // malloc'd, may be NULL
  wovyr_buf out, err;
} wovyr_run;

void wovyr_run_instance(wasm_engine_t *engine, const wasmtime_instance_pre_t *pre, wovyr_run *r);
void wovyr_run_release(wovyr_run *r);
uint64_t wovyr_mono_ns(void);
#endif
