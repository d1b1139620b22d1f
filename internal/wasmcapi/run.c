#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "run.h"

uint64_t wovyr_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static ptrdiff_t buf_write(void *data, const unsigned char *p, size_t n) {
  wovyr_buf *b = data;
  size_t room = b->limit > b->len ? b->limit - b->len : 0;
  size_t take = n < room ? n : room;
  if (take < n) b->truncated = 1;
  if (take > 0) {
    if (b->len + take > b->cap) {
      size_t c = b->cap ? b->cap * 2 : 4096;
      while (c < b->len + take) c *= 2;
      if (c > b->limit) c = b->limit;
      char *d = realloc(b->data, c);
      if (d == NULL) { b->truncated = 1; return (ptrdiff_t)n; }
      b->data = d;
      b->cap = c;
    }
    memcpy(b->data + b->len, p, take);
    b->len += take;
  }
  return (ptrdiff_t)n; // always drained: a full cap never blocks the guest
}

static void set_message_bytes(wovyr_run *r, const char *p, size_t n) {
  free(r->message);
  r->message = malloc(n + 1);
  if (r->message == NULL) return;
  memcpy(r->message, p, n);
  r->message[n] = 0;
}

static void take_error(wovyr_run *r, wasmtime_error_t *e) {
  wasm_name_t m;
  wasmtime_error_message(e, &m);
  set_message_bytes(r, m.data, m.size);
  wasm_byte_vec_delete(&m);
  wasmtime_error_delete(e);
}

static void take_trap(wovyr_run *r, wasm_trap_t *t) {
  wasm_message_t m;
  wasmtime_trap_code_t code;
  r->end = WOVYR_END_TRAP;
  r->trap_code = wasmtime_trap_code(t, &code) ? code : -1;
  wasm_trap_message(t, &m);
  set_message_bytes(r, m.data, m.size);
  wasm_byte_vec_delete(&m);
  wasm_trap_delete(t);
}

// on_epoch runs on every engine tick while this store executes wasm: it ends
// the run when the deadline has passed or the caller cancelled, and otherwise
// asks to be called again at the next tick.
static wasmtime_error_t *on_epoch(wasmtime_context_t *ctx, void *data, uint64_t *delta,
                                  wasmtime_update_deadline_kind_t *kind) {
  (void)ctx;
  wovyr_run *r = data;
  if (__atomic_load_n(&r->cancel, __ATOMIC_RELAXED)) {
    r->end = WOVYR_END_CANCELLED;
    return wasmtime_error_new("wovyr: invocation cancelled");
  }
  if (r->deadline_mono_ns != 0 && wovyr_mono_ns() >= r->deadline_mono_ns) {
    r->end = WOVYR_END_TIMEOUT;
    return wasmtime_error_new("wovyr: wall deadline passed");
  }
  *delta = 1;
  *kind = 0; // WASMTIME_UPDATE_DEADLINE_CONTINUE
  return NULL;
}

static int setup_wasi(wovyr_run *r, wasmtime_context_t *ctx) {
  wasi_config_t *w = wasi_config_new();
  const char *p = r->blob;
  size_t nstr = r->argc + r->envc + 2 * r->npre;
  const char **s = calloc(nstr + 1, sizeof(char *));
  if (s == NULL) { wasi_config_delete(w); return 0; }
  for (size_t i = 0; i < nstr; i++) { s[i] = p; p += strlen(p) + 1; }
  int ok = wasi_config_set_argv(w, r->argc, s);
  if (ok && r->inherit_env) {
    wasi_config_inherit_env(w);
  } else if (ok) {
    const char **names = calloc(r->envc + 1, sizeof(char *));
    const char **values = calloc(r->envc + 1, sizeof(char *));
    char **keys = calloc(r->envc + 1, sizeof(char *));
    ok = names && values && keys;
    for (size_t i = 0; ok && i < r->envc; i++) {
      const char *kv = s[r->argc + i], *eq = strchr(kv, '=');
      keys[i] = strndup(kv, eq ? (size_t)(eq - kv) : strlen(kv));
      names[i] = keys[i];
      values[i] = eq ? eq + 1 : "";
    }
    if (ok) ok = wasi_config_set_env(w, r->envc, names, values);
    for (size_t i = 0; keys && i < r->envc; i++) free(keys[i]);
    free(keys); free(names); free(values);
  }
  for (size_t i = 0; ok && i < r->npre; i++) {
    const char *host = s[r->argc + r->envc + 2 * i], *guest = s[r->argc + r->envc + 2 * i + 1];
    wasi_dir_perms d = WOVYR_DIR_PERMS_READ | (r->pre_write[i] ? WOVYR_DIR_PERMS_WRITE : 0);
    wasi_file_perms f = WOVYR_FILE_PERMS_READ | (r->pre_write[i] ? WOVYR_FILE_PERMS_WRITE : 0);
    if (!wasi_config_preopen_dir(w, host, guest, d, f)) {
      ok = 0;
      const char *msg = "cannot preopen directory ";
      size_t n = strlen(msg) + strlen(host) + 1;
      char *m = malloc(n);
      if (m) { strcpy(m, msg); strcat(m, host); free(r->message); r->message = m; }
    }
  }
  free(s);
  if (!ok) { wasi_config_delete(w); return 0; }
  if (r->inherit_stdio) {
    wasi_config_inherit_stdin(w);
    wasi_config_inherit_stdout(w);
    wasi_config_inherit_stderr(w);
  } else {
    wasm_byte_vec_t in;
    wasm_byte_vec_new(&in, r->stdin_len, r->stdin_data);
    wasi_config_set_stdin_bytes(w, &in);
    r->out.limit = r->err.limit = r->output_limit;
    wasi_config_set_stdout_custom(w, buf_write, &r->out, NULL);
    wasi_config_set_stderr_custom(w, buf_write, &r->err, NULL);
  }
  wasmtime_error_t *e = wasmtime_context_set_wasi(ctx, w);
  if (e) { take_error(r, e); return 0; }
  return 1;
}

void wovyr_run_instance(wasm_engine_t *engine, const wasmtime_instance_pre_t *pre, wovyr_run *r) {
  uint64_t t0 = wovyr_mono_ns();
  r->t0_ns = t0;
  r->deadline_mono_ns = r->wall_ns ? t0 + r->wall_ns : 0;
  wasmtime_store_t *store = wasmtime_store_new(engine, NULL, NULL);
  wasmtime_context_t *ctx = wasmtime_store_context(store);
  wasmtime_store_limiter(store, r->memory_limit, r->table_limit, -1, -1, -1);
  uint64_t fuel = r->fuel ? r->fuel : UINT64_MAX;
  wasmtime_error_t *e = wasmtime_context_set_fuel(ctx, fuel);
  if (e) { wasmtime_error_delete(e); }
  // Armed even without a deadline, so that cancellation always works.
  wasmtime_store_epoch_deadline_callback(store, on_epoch, r, NULL);
  wasmtime_context_set_epoch_deadline(ctx, 1);

  if (!setup_wasi(r, ctx)) {
    r->end = WOVYR_END_SETUP;
    goto done;
  }
  wasmtime_instance_t inst;
  wasm_trap_t *trap = NULL;
  e = wasmtime_instance_pre_instantiate(pre, ctx, &inst, &trap);
  r->instantiate_ns = wovyr_mono_ns() - t0;
  if (e) { r->end = WOVYR_END_INSTANTIATE; take_error(r, e); goto done; }
  if (trap) { take_trap(r, trap); goto done; }
  wasmtime_extern_t start;
  if (!wasmtime_instance_export_get(ctx, &inst, "_start", 6, &start) || start.kind != WASMTIME_EXTERN_FUNC) {
    r->end = WOVYR_END_NO_START;
    goto done;
  }
  r->start_ns = wovyr_mono_ns();
  e = wasmtime_func_call(ctx, &start.of.func, NULL, 0, NULL, 0, &trap);
  r->ended_ns = wovyr_mono_ns();
  if (e) {
    int status;
    if (wasmtime_error_exit_status(e, &status)) {
      r->end = WOVYR_END_EXIT;
      r->exit_code = status;
      wasmtime_error_delete(e);
    } else {
      if (r->end != WOVYR_END_TIMEOUT && r->end != WOVYR_END_CANCELLED) r->end = WOVYR_END_HOST_ERROR;
      take_error(r, e);
    }
  } else if (trap) {
    take_trap(r, trap);
  } else {
    r->end = WOVYR_END_EXIT;
    r->exit_code = 0;
  }
  wasmtime_extern_t mem;
  if (wasmtime_instance_export_get(ctx, &inst, "memory", 6, &mem) && mem.kind == WASMTIME_EXTERN_MEMORY) {
    r->memory_size = wasmtime_memory_data_size(ctx, &mem.of.memory);
  }
done:
  if (r->ended_ns == 0) r->ended_ns = wovyr_mono_ns();
  if (r->fuel) {
    uint64_t left = 0;
    e = wasmtime_context_get_fuel(ctx, &left);
    if (e) wasmtime_error_delete(e);
    r->fuel_used = r->fuel - left;
  }
  wasmtime_store_delete(store);
}

void wovyr_run_release(wovyr_run *r) {
  free(r->out.data);
  free(r->err.data);
  free(r->message);
  free(r);
}
