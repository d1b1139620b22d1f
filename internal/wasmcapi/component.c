#include <stdlib.h>
#include <string.h>
#include "component.h"
#include "run.h"

// The codec: Go encodes arguments and decodes results in this format, which
// mirrors wasmtime_component_val_t one to one. Each value is a kind byte
// (WOVYR_CVAL_*) and then:
//   bool, s8, u8: 1 byte; s16, u16: 2; s32, u32, f32, char: 4; s64, u64, f64: 8
//   (little-endian, floats as their bits)
//   string, enum: u32 length, bytes
//   list, tuple: u32 count, values
//   record: u32 count, then per field: u32 length, name, value
//   variant: u32 length, case name, u8 has payload, [value]
//   option: u8 some, [value]
//   result: u8 ok, u8 has payload, [value]
//   flags: u32 count, then per flag: u32 length, name
//   resource: u32 slot in the instance's table, u8 own (an argument: the
//   callee takes the resource and the slot is freed; a result: always 1)

typedef struct { const uint8_t *p, *end; } rd;
// wr is an encoding buffer; oom is set when it could not grow, or when a
// resource could not be held (unheld counts those).
// A wr may start in a buffer it does not own (ext, the caller's): growing
// moves it to malloc'd memory.
typedef struct { uint8_t *data; size_t len, cap; int oom, unheld, ext; wovyr_cinst *c; } wr;

static int rd_n(rd *r, void *dst, size_t n) {
  if ((size_t)(r->end - r->p) < n) return 0;
  memcpy(dst, r->p, n);
  r->p += n;
  return 1;
}

static int rd_u32(rd *r, uint32_t *v) { return rd_n(r, v, 4); }

static int rd_name(rd *r, wasm_name_t *out) {
  uint32_t n;
  if (!rd_u32(r, &n) || (size_t)(r->end - r->p) < n) return 0;
  wasm_byte_vec_new(out, n, (const wasm_byte_t *)r->p);
  r->p += n;
  return 1;
}

static int decode(wovyr_cinst *c, rd *r, wasmtime_component_val_t *v, int depth);

// decode_boxed decodes one value onto Wasmtime's heap (variant, option and
// result payloads).
static int decode_boxed(wovyr_cinst *c, rd *r, wasmtime_component_val_t **out, int depth) {
  wasmtime_component_val_t tmp = {.kind = WOVYR_CVAL_BOOL};
  int ok = decode(c, r, &tmp, depth);
  *out = wasmtime_component_val_new(&tmp);
  return ok;
}

static void fill_bool(wasmtime_component_val_t *v, size_t n) {
  for (size_t i = 0; i < n; i++) { v[i].kind = WOVYR_CVAL_BOOL; v[i].of.boolean = false; }
}

// decode leaves v in a state wasmtime_component_val_delete can free even
// when it fails part way. Resources come from c's table (c NULL: none).
static int decode(wovyr_cinst *c, rd *r, wasmtime_component_val_t *v, int depth) {
  uint8_t kind;
  v->kind = WOVYR_CVAL_BOOL;
  v->of.boolean = false;
  if (depth > 100 || !rd_n(r, &kind, 1)) return 0;
  uint32_t n;
  uint8_t b;
  switch (kind) {
  case WOVYR_CVAL_BOOL:
    if (!rd_n(r, &b, 1)) return 0;
    v->of.boolean = b != 0;
    break;
  case WOVYR_CVAL_S8: case WOVYR_CVAL_U8:
    if (!rd_n(r, &v->of.u8, 1)) return 0;
    break;
  case WOVYR_CVAL_S16: case WOVYR_CVAL_U16:
    if (!rd_n(r, &v->of.u16, 2)) return 0;
    break;
  case WOVYR_CVAL_S32: case WOVYR_CVAL_U32: case WOVYR_CVAL_F32: case WOVYR_CVAL_CHAR:
    if (!rd_n(r, &v->of.u32, 4)) return 0;
    break;
  case WOVYR_CVAL_S64: case WOVYR_CVAL_U64: case WOVYR_CVAL_F64:
    if (!rd_n(r, &v->of.u64, 8)) return 0;
    break;
  case WOVYR_CVAL_STRING:
    v->kind = kind;
    if (!rd_name(r, &v->of.string)) { v->kind = WOVYR_CVAL_BOOL; return 0; }
    return 1;
  case WOVYR_CVAL_ENUM:
    v->kind = kind;
    if (!rd_name(r, &v->of.enumeration)) { v->kind = WOVYR_CVAL_BOOL; return 0; }
    return 1;
  case WOVYR_CVAL_LIST: case WOVYR_CVAL_TUPLE: {
    if (!rd_u32(r, &n) || (size_t)(r->end - r->p) < n) return 0; // each value takes >= 1 byte
    wasmtime_component_vallist_t l;
    if (kind == WOVYR_CVAL_LIST) wasmtime_component_vallist_new_uninit(&l, n);
    else wasmtime_component_valtuple_new_uninit((wasmtime_component_valtuple_t *)&l, n);
    fill_bool(l.data, n);
    v->kind = kind;
    v->of.list = l;
    for (uint32_t i = 0; i < n; i++)
      if (!decode(c, r, &l.data[i], depth + 1)) return 0;
    return 1;
  }
  case WOVYR_CVAL_RECORD: {
    if (!rd_u32(r, &n) || (size_t)(r->end - r->p) < n) return 0;
    wasmtime_component_valrecord_t rec;
    wasmtime_component_valrecord_new_uninit(&rec, n);
    for (uint32_t i = 0; i < n; i++) {
      rec.data[i].name.size = 0;
      rec.data[i].name.data = NULL;
      fill_bool(&rec.data[i].val, 1);
    }
    v->kind = kind;
    v->of.record = rec;
    for (uint32_t i = 0; i < n; i++) {
      if (!rd_name(r, &rec.data[i].name)) return 0;
      if (!decode(c, r, &rec.data[i].val, depth + 1)) return 0;
    }
    return 1;
  }
  case WOVYR_CVAL_VARIANT: {
    wasmtime_component_valvariant_t var = {{0, NULL}, NULL};
    if (!rd_name(r, &var.discriminant)) return 0;
    v->kind = kind;
    v->of.variant = var;
    if (!rd_n(r, &b, 1)) return 0;
    if (b) return decode_boxed(c, r, &v->of.variant.val, depth + 1);
    return 1;
  }
  case WOVYR_CVAL_OPTION:
    if (!rd_n(r, &b, 1)) return 0;
    v->kind = kind;
    v->of.option = NULL;
    if (b) return decode_boxed(c, r, &v->of.option, depth + 1);
    return 1;
  case WOVYR_CVAL_RESULT: {
    uint8_t has;
    if (!rd_n(r, &b, 1) || !rd_n(r, &has, 1)) return 0;
    v->kind = kind;
    v->of.result.is_ok = b != 0;
    v->of.result.val = NULL;
    if (has) return decode_boxed(c, r, &v->of.result.val, depth + 1);
    return 1;
  }
  case WOVYR_CVAL_FLAGS: {
    if (!rd_u32(r, &n) || (size_t)(r->end - r->p) < n) return 0;
    wasmtime_component_valflags_t f;
    wasmtime_component_valflags_new_uninit(&f, n);
    for (uint32_t i = 0; i < n; i++) { f.data[i].size = 0; f.data[i].data = NULL; }
    v->kind = kind;
    v->of.flags = f;
    for (uint32_t i = 0; i < n; i++)
      if (!rd_name(r, &f.data[i])) return 0;
    return 1;
  }
  case WOVYR_CVAL_RESOURCE: {
    uint32_t slot;
    if (!rd_u32(r, &slot) || !rd_n(r, &b, 1)) return 0;
    if (c == NULL || slot >= c->nres || c->res[slot] == NULL) return 0;
    v->kind = kind;
    if (b) { // own: the callee takes it
      v->of.resource = c->res[slot];
      c->res[slot] = NULL;
    } else {
      v->of.resource = wasmtime_component_resource_any_clone(c->res[slot]);
    }
    return 1;
  }
  default:
    return 0;
  }
  v->kind = kind;
  return 1;
}

// hold keeps a resource a call returned in a free slot of c's table.
static int hold(wovyr_cinst *c, const wasmtime_component_resource_any_t *res, uint32_t *slot) {
  if (c == NULL) return 0;
  for (uint32_t i = 0; i < c->nres; i++) {
    if (c->res[i] == NULL) {
      c->res[i] = wasmtime_component_resource_any_clone(res);
      *slot = i;
      return 1;
    }
  }
  if (c->nres == WOVYR_MAX_HANDLES) return 0;
  if (c->nres == c->capres) {
    uint32_t cap = c->capres ? c->capres * 2 : 8;
    void *p = realloc(c->res, cap * sizeof *c->res);
    if (p == NULL) return 0;
    c->res = p;
    c->capres = cap;
  }
  c->res[c->nres] = wasmtime_component_resource_any_clone(res);
  *slot = c->nres++;
  return 1;
}

static void wr_n(wr *w, const void *p, size_t n) {
  if (w->oom) return;
  if (w->len + n > w->cap) {
    size_t c = w->cap ? w->cap * 2 : 64;
    while (c < w->len + n) c *= 2;
    uint8_t *d = w->ext ? malloc(c) : realloc(w->data, c);
    if (d == NULL) { w->oom = 1; return; }
    if (w->ext) memcpy(d, w->data, w->len);
    w->data = d;
    w->cap = c;
    w->ext = 0;
  }
  memcpy(w->data + w->len, p, n);
  w->len += n;
}

static void wr_u8(wr *w, uint8_t b) { wr_n(w, &b, 1); }
static void wr_u32(wr *w, uint32_t v) { wr_n(w, &v, 4); }
static void wr_name(wr *w, const wasm_name_t *s) { wr_u32(w, (uint32_t)s->size); wr_n(w, s->data, s->size); }

static void encode(wr *w, const wasmtime_component_val_t *v) {
  wr_u8(w, v->kind);
  switch (v->kind) {
  case WOVYR_CVAL_BOOL: wr_u8(w, v->of.boolean ? 1 : 0); break;
  case WOVYR_CVAL_S8: case WOVYR_CVAL_U8: wr_n(w, &v->of.u8, 1); break;
  case WOVYR_CVAL_S16: case WOVYR_CVAL_U16: wr_n(w, &v->of.u16, 2); break;
  case WOVYR_CVAL_S32: case WOVYR_CVAL_U32: case WOVYR_CVAL_F32: case WOVYR_CVAL_CHAR:
    wr_n(w, &v->of.u32, 4); break;
  case WOVYR_CVAL_S64: case WOVYR_CVAL_U64: case WOVYR_CVAL_F64: wr_n(w, &v->of.u64, 8); break;
  case WOVYR_CVAL_STRING: wr_name(w, &v->of.string); break;
  case WOVYR_CVAL_ENUM: wr_name(w, &v->of.enumeration); break;
  case WOVYR_CVAL_LIST: case WOVYR_CVAL_TUPLE:
    wr_u32(w, (uint32_t)v->of.list.size);
    for (size_t i = 0; i < v->of.list.size; i++) encode(w, &v->of.list.data[i]);
    break;
  case WOVYR_CVAL_RECORD:
    wr_u32(w, (uint32_t)v->of.record.size);
    for (size_t i = 0; i < v->of.record.size; i++) {
      wr_name(w, &v->of.record.data[i].name);
      encode(w, &v->of.record.data[i].val);
    }
    break;
  case WOVYR_CVAL_VARIANT:
    wr_name(w, &v->of.variant.discriminant);
    wr_u8(w, v->of.variant.val != NULL);
    if (v->of.variant.val) encode(w, v->of.variant.val);
    break;
  case WOVYR_CVAL_OPTION:
    wr_u8(w, v->of.option != NULL);
    if (v->of.option) encode(w, v->of.option);
    break;
  case WOVYR_CVAL_RESULT:
    wr_u8(w, v->of.result.is_ok);
    wr_u8(w, v->of.result.val != NULL);
    if (v->of.result.val) encode(w, v->of.result.val);
    break;
  case WOVYR_CVAL_FLAGS:
    wr_u32(w, (uint32_t)v->of.flags.size);
    for (size_t i = 0; i < v->of.flags.size; i++) wr_name(w, &v->of.flags.data[i]);
    break;
  case WOVYR_CVAL_RESOURCE: {
    uint32_t slot = 0;
    if (!hold(w->c, v->of.resource, &slot)) w->unheld++;
    wr_u32(w, slot);
    wr_u8(w, 1);
    break;
  }
  default: // future, stream, error-context: the Go side refuses their types
    break;
  }
}

static char *error_text(wasmtime_error_t *e) {
  wasm_name_t m;
  wasmtime_error_message(e, &m);
  char *s = malloc(m.size + 1);
  if (s) { memcpy(s, m.data, m.size); s[m.size] = 0; }
  wasm_byte_vec_delete(&m);
  wasmtime_error_delete(e);
  return s;
}

static wasmtime_error_t *on_epoch(wasmtime_context_t *ctx, void *data, uint64_t *delta,
                                  wasmtime_update_deadline_kind_t *kind) {
  (void)ctx;
  wovyr_cinst *c = data;
  if (__atomic_load_n(&c->cancel, __ATOMIC_RELAXED)) {
    c->end = WOVYR_CEND_CANCELLED;
    return wasmtime_error_new("wovyr: call cancelled");
  }
  if (c->deadline_mono_ns != 0 && wovyr_mono_ns() >= c->deadline_mono_ns) {
    c->end = WOVYR_CEND_TIMEOUT;
    return wasmtime_error_new("wovyr: wall deadline passed");
  }
  *delta = 1;
  *kind = 0; // WASMTIME_UPDATE_DEADLINE_CONTINUE
  return NULL;
}

wovyr_cinst *wovyr_cinst_new(wasm_engine_t *engine, const wasmtime_component_linker_t *linker,
                             const wasmtime_component_t *component, int64_t memory_limit,
                             int64_t table_limit, int wasi, uintptr_t host, char **message) {
  wovyr_cinst *c = calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  c->host = host;
  // The store's data is the instance, so that a host call finds it.
  c->store = wasmtime_store_new(engine, c, NULL);
  c->ctx = wasmtime_store_context(c->store);
  wasmtime_store_limiter(c->store, memory_limit, table_limit, -1, -1, -1);
  wasmtime_error_t *e = wasmtime_context_set_fuel(c->ctx, UINT64_MAX);
  if (e) wasmtime_error_delete(e);
  wasmtime_store_epoch_deadline_callback(c->store, on_epoch, c, NULL);
  wasmtime_context_set_epoch_deadline(c->ctx, 1);
  if (wasi) {
    // An empty context: nothing inherited, no preopens. The store needs one
    // before any WASI import can be called.
    e = wasmtime_context_set_wasi(c->ctx, wasi_config_new());
    if (e) goto fail;
  }
  e = wasmtime_component_linker_instantiate(linker, c->ctx, component, &c->inst);
  if (e) goto fail;
  return c;
fail:
  *message = error_text(e);
  wovyr_cinst_delete(c);
  return NULL;
}

void wovyr_cinst_delete(wovyr_cinst *c) {
  if (c == NULL) return;
  // The store goes with them: their destructors need not run.
  for (uint32_t i = 0; i < c->nres; i++)
    if (c->res[i]) wasmtime_component_resource_any_delete(c->res[i]);
  free(c->res);
  wasmtime_store_delete(c->store);
  free(c);
}

// arm sets the store's fuel and deadline for call, begun at t0.
static void arm(wovyr_cinst *c, wovyr_ccall *call, uint64_t t0) {
  wasmtime_error_t *e = wasmtime_context_set_fuel(c->ctx, call->fuel ? call->fuel : UINT64_MAX);
  if (e) wasmtime_error_delete(e);
  c->end = WOVYR_CEND_OK;
  c->deadline_mono_ns = call->wall_ns ? t0 + call->wall_ns : 0;
  wasmtime_context_set_epoch_deadline(c->ctx, 1);
}

// ended records the fuel call used and, when e is an error (which it
// frees), how the call ended. It returns whether it failed.
static int ended(wovyr_cinst *c, wovyr_ccall *call, wasmtime_error_t *e) {
  uint64_t left = 0;
  wasmtime_error_t *fe = wasmtime_context_get_fuel(c->ctx, &left);
  if (fe) wasmtime_error_delete(fe);
  if (call->fuel) call->fuel_used = call->fuel - left;
  if (e == NULL) return 0;
  call->message = error_text(e);
  if (c->end != WOVYR_CEND_OK) call->end = c->end;
  else if (call->fuel && left == 0) call->end = WOVYR_CEND_OUT_OF_FUEL;
  else call->end = WOVYR_CEND_TRAP;
  return 1;
}

void wovyr_cinst_drop(wovyr_cinst *c, wovyr_ccall *call, uint32_t slot) {
  uint64_t t0 = wovyr_mono_ns();
  if (slot >= c->nres || c->res[slot] == NULL) {
    call->end = WOVYR_CEND_BAD_ARGS;
    return;
  }
  wasmtime_component_resource_any_t *res = c->res[slot];
  c->res[slot] = NULL;
  arm(c, call, t0);
  ended(c, call, wasmtime_component_resource_any_drop(c->ctx, res));
  wasmtime_component_resource_any_delete(res);
  call->call_ns = wovyr_mono_ns() - t0;
}

void wovyr_cinst_call(wovyr_cinst *c, wovyr_ccall *call, const uint8_t *in, uint8_t *out, size_t out_cap) {
  uint64_t t0 = wovyr_mono_ns();
  // The function of the last call is kept: a store's function stays
  // valid as long as the store, and calls repeat.
  if (call->func != c->last_func) {
    if (!wasmtime_component_instance_get_func(&c->inst, c->ctx, call->func, &c->last_f)) {
      c->last_func = NULL;
      call->end = WOVYR_CEND_NO_FUNC;
      return;
    }
    c->last_func = call->func;
  }
  wasmtime_component_func_t f = c->last_f;
  size_t n = call->nargs;
  wasmtime_component_val_t stack[8];
  wasmtime_component_val_t *args = n <= 8 ? stack : malloc(n * sizeof *args);
  if (args == NULL) { call->end = WOVYR_CEND_BAD_ARGS; return; }
  rd r = {in, in + call->args_len};
  size_t decoded = 0;
  int ok = 1;
  for (; decoded < n && ok; decoded++) ok = decode(c, &r, &args[decoded], 0);
  if (!ok || r.p != r.end) {
    for (size_t i = 0; i < decoded; i++) wasmtime_component_val_delete(&args[i]);
    if (args != stack) free(args);
    call->end = WOVYR_CEND_BAD_ARGS;
    return;
  }

  arm(c, call, t0);
  wasmtime_component_val_t result = {.kind = WOVYR_CVAL_BOOL};
  wasmtime_error_t *e = wasmtime_component_func_call(&f, c->ctx, args, n, &result, call->has_result ? 1 : 0);
  for (size_t i = 0; i < n; i++) wasmtime_component_val_delete(&args[i]);
  if (args != stack) free(args);

  if (!ended(c, call, e)) {
    if (call->has_result) {
      wr w = {.data = out, .cap = out_cap, .ext = 1, .c = c}; // out, unless it outgrows it
      encode(&w, &result);
      wasmtime_component_val_delete(&result);
      call->result_len = w.len;
      if (w.oom || w.unheld) {
        call->end = WOVYR_CEND_TRAP;
        if (w.unheld) call->message = strdup("wovyr: the call returned more resources than an instance may hold");
        if (!w.ext) free(w.data);
      } else if (!w.ext) {
        call->result = w.data;
      }
    }
    e = wasmtime_component_func_post_return(&f, c->ctx);
    if (e) {
      call->message = error_text(e);
      call->end = WOVYR_CEND_TRAP;
    }
  }
  call->call_ns = wovyr_mono_ns() - t0;
}

// wovyrHostCall is Go's side of a host call (component_host.go): it gets
// the arguments encoded, and returns a WOVYR_CEND_* with the encoded
// results (malloc'd) or a message (malloc'd).
extern int wovyrHostCall(uintptr_t fn, uintptr_t inst, uint8_t *args, size_t args_len,
                         uint8_t **out, size_t *out_len, char **message);

// host_call is every host function's callback: env is the function's Go
// handle, and the store's data is the calling instance.
static wasmtime_error_t *host_call(void *env, wasmtime_context_t *ctx, const wasmtime_component_func_type_t *ty,
                                   wasmtime_component_val_t *args, size_t nargs,
                                   wasmtime_component_val_t *results, size_t nresults) {
  (void)ty;
  wovyr_cinst *c = wasmtime_context_get_data(ctx);
  wr w = {0};
  for (size_t i = 0; i < nargs; i++) encode(&w, &args[i]);
  if (w.oom || w.unheld) {
    free(w.data);
    return wasmtime_error_new(w.oom ? "wovyr: out of memory encoding a host call's arguments" : "wovyr: host functions take no resources");
  }
  uint8_t *out = NULL;
  size_t out_len = 0;
  char *msg = NULL;
  int end = wovyrHostCall((uintptr_t)env, c ? c->host : 0, w.data, w.len, &out, &out_len, &msg);
  free(w.data);
  if (end != WOVYR_CEND_OK) {
    if (c && end != WOVYR_CEND_TRAP) c->end = end;
    wasmtime_error_t *e = wasmtime_error_new(msg ? msg : "wovyr: host call failed");
    free(msg);
    free(out);
    return e;
  }
  rd r = {out, out + out_len};
  int ok = 1;
  for (size_t i = 0; i < nresults && ok; i++) ok = decode(NULL, &r, &results[i], 0);
  ok = ok && r.p == r.end;
  free(out);
  return ok ? NULL : wasmtime_error_new("wovyr: a host call's results did not decode");
}

char *wovyr_linker_define(wasmtime_component_linker_t *linker, const char *iface, size_t iface_len,
                          size_t n, const char *names, const size_t *name_lens, const uintptr_t *ids) {
  wasmtime_component_linker_instance_t *root = wasmtime_component_linker_root(linker), *in = NULL;
  wasmtime_error_t *e = wasmtime_component_linker_instance_add_instance(root, iface, iface_len, &in);
  for (size_t i = 0; e == NULL && i < n; i++) {
    e = wasmtime_component_linker_instance_add_func(in, names, name_lens[i], host_call, (void *)ids[i], NULL);
    names += name_lens[i];
  }
  if (in) wasmtime_component_linker_instance_delete(in);
  wasmtime_component_linker_instance_delete(root);
  return e ? error_text(e) : NULL;
}

int wovyr_cval_roundtrip(const uint8_t *in, size_t len, size_t n, uint8_t **out, size_t *out_len) {
  rd r = {in, in + len};
  wr w = {0};
  int ok = 1;
  for (size_t i = 0; i < n && ok; i++) {
    wasmtime_component_val_t v;
    ok = decode(NULL, &r, &v, 0);
    if (ok) encode(&w, &v);
    wasmtime_component_val_delete(&v);
  }
  *out = w.data;
  *out_len = w.len;
  return ok && r.p == r.end && !w.oom;
}

// wovyr_bench_raw is the benchmarks' floor: the bare C API in a C loop, no
// codec and no cgo per iteration. mode 0 instantiates (store, limits, fuel,
// epoch deadline, instantiate, delete) n times; mode 1 calls func (which
// takes two u32 and returns one) n times on one instance. Each iteration's
// nanoseconds go to ns[i]. It returns 0, or -1 when anything failed.
int wovyr_bench_raw(wasm_engine_t *engine, const wasmtime_component_linker_t *linker,
                    const wasmtime_component_t *component, const wasmtime_component_export_index_t *func,
                    int mode, size_t n, uint64_t *ns) {
  wasmtime_store_t *store = NULL;
  wasmtime_context_t *ctx = NULL;
  wasmtime_component_instance_t inst;
  wasmtime_component_func_t f;
  if (mode == 1) {
    store = wasmtime_store_new(engine, NULL, NULL);
    ctx = wasmtime_store_context(store);
    wasmtime_error_t *e = wasmtime_context_set_fuel(ctx, UINT64_MAX);
    if (e) wasmtime_error_delete(e);
    wasmtime_context_set_epoch_deadline(ctx, UINT64_MAX / 2);
    e = wasmtime_component_linker_instantiate(linker, ctx, component, &inst);
    if (e || !wasmtime_component_instance_get_func(&inst, ctx, func, &f)) {
      if (e) wasmtime_error_delete(e);
      wasmtime_store_delete(store);
      return -1;
    }
  }
  for (size_t i = 0; i < n; i++) {
    uint64_t t0 = wovyr_mono_ns();
    wasmtime_error_t *e = NULL;
    if (mode == 0) {
      wasmtime_store_t *s = wasmtime_store_new(engine, NULL, NULL);
      wasmtime_context_t *c = wasmtime_store_context(s);
      wasmtime_store_limiter(s, 64 << 20, -1, -1, -1, -1);
      e = wasmtime_context_set_fuel(c, 1000000);
      if (e) wasmtime_error_delete(e);
      wasmtime_context_set_epoch_deadline(c, 1000);
      e = wasmtime_component_linker_instantiate(linker, c, component, &inst);
      wasmtime_store_delete(s);
    } else {
      wasmtime_component_val_t args[2] = {{.kind = WOVYR_CVAL_U32, .of.u32 = 40}, {.kind = WOVYR_CVAL_U32, .of.u32 = 2}};
      wasmtime_component_val_t res = {.kind = WOVYR_CVAL_BOOL};
      e = wasmtime_component_func_call(&f, ctx, args, 2, &res, 1);
      if (!e) e = wasmtime_component_func_post_return(&f, ctx);
    }
    ns[i] = wovyr_mono_ns() - t0;
    if (e) {
      wasmtime_error_delete(e);
      if (store) wasmtime_store_delete(store);
      return -1;
    }
  }
  if (store) wasmtime_store_delete(store);
  return 0;
}
