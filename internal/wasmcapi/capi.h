// capi.h declares the part of the Wasmtime C API (v39.0.1) that wovyr uses.
//
// The declarations are copied from the headers bundled with
// github.com/bytecodealliance/wasmtime-go/v39 (build/include), whose static
// library provides the symbols at link time. We copy instead of including
// because cgo cannot name another module's directory in CFLAGS. Struct bodies
// are guarded by the real headers' include guards, so TestHeaderMatches can
// compile this file after the real headers: the compiler then checks every
// prototype, and the static assertions below check every layout.
#ifndef WOVYR_WASMCAPI_H
#define WOVYR_WASMCAPI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct wasm_config_t wasm_config_t;
typedef struct wasm_engine_t wasm_engine_t;
typedef struct wasm_trap_t wasm_trap_t;
typedef struct wasmtime_error wasmtime_error_t;
typedef struct wasmtime_module wasmtime_module_t;
typedef struct wasmtime_linker wasmtime_linker_t;
typedef struct wasmtime_store wasmtime_store_t;
typedef struct wasmtime_context wasmtime_context_t;
typedef struct wasmtime_instance_pre wasmtime_instance_pre_t;
typedef struct wasmtime_pooling_allocation_config_t wasmtime_pooling_allocation_config_t;
typedef struct wasi_config_t wasi_config_t;
typedef union wasmtime_val_raw wasmtime_val_raw_t;
typedef struct wasmtime_val wasmtime_val_t;
typedef uint8_t wasmtime_trap_code_t;
typedef uint8_t wasmtime_extern_kind_t;
typedef uint8_t wasmtime_update_deadline_kind_t;
typedef size_t wasi_dir_perms;
typedef size_t wasi_file_perms;
typedef char byte_t;
typedef byte_t wasm_byte_t;

#ifndef WASM_H
typedef struct wasm_byte_vec_t {
  size_t size;
  wasm_byte_t *data;
} wasm_byte_vec_t;
#endif
typedef wasm_byte_vec_t wasm_name_t;
typedef wasm_name_t wasm_message_t;
typedef struct wasm_importtype_t wasm_importtype_t;
#ifndef WASM_H
typedef struct wasm_importtype_vec_t {
  size_t size;
  wasm_importtype_t **data;
} wasm_importtype_vec_t;
#endif

#ifndef WASMTIME_INSTANCE_H
typedef struct wasmtime_instance {
  uint64_t store_id;
  size_t __private;
} wasmtime_instance_t;
#endif

#ifndef WASMTIME_EXTERN_H
typedef struct wasmtime_func {
  uint64_t store_id;
  void *__private;
} wasmtime_func_t;
typedef struct wasmtime_table {
  struct {
    uint64_t store_id;
    uint32_t __private1;
  };
  uint32_t __private2;
} wasmtime_table_t;
typedef struct wasmtime_memory {
  struct {
    uint64_t store_id;
    uint32_t __private1;
  };
  uint32_t __private2;
} wasmtime_memory_t;
typedef struct wasmtime_global {
  uint64_t store_id;
  uint32_t __private1;
  uint32_t __private2;
  uint32_t __private3;
} wasmtime_global_t;
typedef union wasmtime_extern_union {
  wasmtime_func_t func;
  wasmtime_global_t global;
  wasmtime_table_t table;
  wasmtime_memory_t memory;
  struct wasmtime_sharedmemory *sharedmemory;
} wasmtime_extern_union_t;
typedef struct wasmtime_extern {
  wasmtime_extern_kind_t kind;
  wasmtime_extern_union_t of;
} wasmtime_extern_t;
#define WASMTIME_EXTERN_FUNC 0
#define WASMTIME_EXTERN_MEMORY 3
#endif

_Static_assert(sizeof(wasm_byte_vec_t) == 16, "wasm_byte_vec_t layout");
_Static_assert(sizeof(wasm_importtype_vec_t) == 16, "wasm_importtype_vec_t layout");
_Static_assert(sizeof(wasmtime_instance_t) == 16, "wasmtime_instance_t layout");
_Static_assert(sizeof(wasmtime_func_t) == 16, "wasmtime_func_t layout");
_Static_assert(sizeof(wasmtime_extern_t) == 32, "wasmtime_extern_t layout");
_Static_assert(offsetof(wasmtime_extern_t, of) == 8, "wasmtime_extern_t layout");

// Trap codes used (enum wasmtime_trap_code_enum, same order as trap.h).
#define WOVYR_TRAP_STACK_OVERFLOW 0
#define WOVYR_TRAP_INTERRUPT 10
#define WOVYR_TRAP_OUT_OF_FUEL 12
#define WOVYR_DIR_PERMS_READ 1
#define WOVYR_DIR_PERMS_WRITE 2
#define WOVYR_FILE_PERMS_READ 1
#define WOVYR_FILE_PERMS_WRITE 2

// wasm.h
void wasm_byte_vec_new(wasm_byte_vec_t *out, size_t, const wasm_byte_t[]);
void wasm_byte_vec_delete(wasm_byte_vec_t *);
wasm_config_t *wasm_config_new(void);
wasm_engine_t *wasm_engine_new_with_config(wasm_config_t *);
void wasm_engine_delete(wasm_engine_t *);
void wasm_trap_delete(wasm_trap_t *);
void wasm_trap_message(const wasm_trap_t *, wasm_message_t *out);
const wasm_name_t *wasm_importtype_module(const wasm_importtype_t *);
const wasm_name_t *wasm_importtype_name(const wasm_importtype_t *);
void wasm_importtype_vec_delete(wasm_importtype_vec_t *);

// wasmtime/config.h
void wasmtime_config_consume_fuel_set(wasm_config_t *, bool);
void wasmtime_config_epoch_interruption_set(wasm_config_t *, bool);
void wasmtime_config_max_wasm_stack_set(wasm_config_t *, size_t);
void wasmtime_config_wasm_threads_set(wasm_config_t *, bool);
void wasmtime_config_parallel_compilation_set(wasm_config_t *, bool);
void wasmtime_config_memory_init_cow_set(wasm_config_t *, bool);
#define WOVYR_OPT_LEVEL_NONE 0
void wasmtime_config_cranelift_opt_level_set(wasm_config_t *, uint8_t);
void wasmtime_config_cranelift_flag_set(wasm_config_t *, const char *key, const char *value);
void wasmtime_config_memory_reservation_set(wasm_config_t *, uint64_t);
void wasmtime_config_memory_guard_size_set(wasm_config_t *, uint64_t);
wasmtime_pooling_allocation_config_t *wasmtime_pooling_allocation_config_new();
void wasmtime_pooling_allocation_config_delete(wasmtime_pooling_allocation_config_t *);
void wasmtime_pooling_allocation_config_total_core_instances_set(wasmtime_pooling_allocation_config_t *, uint32_t);
void wasmtime_pooling_allocation_config_total_memories_set(wasmtime_pooling_allocation_config_t *, uint32_t);
void wasmtime_pooling_allocation_config_total_tables_set(wasmtime_pooling_allocation_config_t *, uint32_t);
void wasmtime_pooling_allocation_config_total_stacks_set(wasmtime_pooling_allocation_config_t *, uint32_t);
void wasmtime_pooling_allocation_config_total_component_instances_set(wasmtime_pooling_allocation_config_t *, uint32_t);
void wasmtime_pooling_allocation_config_total_gc_heaps_set(wasmtime_pooling_allocation_config_t *, uint32_t);
void wasmtime_pooling_allocation_config_max_memory_size_set(wasmtime_pooling_allocation_config_t *, size_t);
void wasmtime_pooling_allocation_config_max_core_instance_size_set(wasmtime_pooling_allocation_config_t *, size_t);
void wasmtime_pooling_allocation_config_table_elements_set(wasmtime_pooling_allocation_config_t *, size_t);
void wasmtime_pooling_allocation_config_max_unused_warm_slots_set(wasmtime_pooling_allocation_config_t *, uint32_t);
void wasmtime_pooling_allocation_config_linear_memory_keep_resident_set(wasmtime_pooling_allocation_config_t *, size_t);
void wasmtime_pooling_allocation_strategy_set(wasm_config_t *, const wasmtime_pooling_allocation_config_t *);

// wasmtime/engine.h, error.h, trap.h
void wasmtime_engine_increment_epoch(wasm_engine_t *engine);
void wasmtime_error_delete(wasmtime_error_t *error);
void wasmtime_error_message(const wasmtime_error_t *error, wasm_name_t *message);
bool wasmtime_error_exit_status(const wasmtime_error_t *, int *status);
wasmtime_error_t *wasmtime_error_new(const char *);
bool wasmtime_trap_code(const wasm_trap_t *, wasmtime_trap_code_t *code);

// wasmtime/module.h
wasmtime_error_t *wasmtime_module_new(wasm_engine_t *engine, const uint8_t *wasm, size_t wasm_len, wasmtime_module_t **ret);
void wasmtime_module_delete(wasmtime_module_t *m);
wasmtime_error_t *wasmtime_module_validate(wasm_engine_t *engine, const uint8_t *wasm, size_t wasm_len);
wasmtime_error_t *wasmtime_module_serialize(wasmtime_module_t *module, wasm_byte_vec_t *ret);
wasmtime_error_t *wasmtime_module_deserialize(wasm_engine_t *engine, const uint8_t *bytes, size_t bytes_len, wasmtime_module_t **ret);
void wasmtime_module_imports(const wasmtime_module_t *module, wasm_importtype_vec_t *out);

// wasmtime/linker.h, instance.h
wasmtime_linker_t *wasmtime_linker_new(wasm_engine_t *engine);
void wasmtime_linker_delete(wasmtime_linker_t *linker);
wasmtime_error_t *wasmtime_linker_define_wasi(wasmtime_linker_t *linker);
wasmtime_error_t *wasmtime_linker_instantiate_pre(const wasmtime_linker_t *linker, const wasmtime_module_t *module, wasmtime_instance_pre_t **instance_pre);
void wasmtime_instance_pre_delete(wasmtime_instance_pre_t *instance_pre);
wasmtime_error_t *wasmtime_instance_pre_instantiate(const wasmtime_instance_pre_t *instance_pre, wasmtime_context_t *store, wasmtime_instance_t *instance, wasm_trap_t **trap_ptr);
bool wasmtime_instance_export_get(wasmtime_context_t *store, const wasmtime_instance_t *instance, const char *name, size_t name_len, wasmtime_extern_t *item);
void wasmtime_extern_delete(wasmtime_extern_t *val);

// wasmtime/store.h, func.h, memory.h
wasmtime_store_t *wasmtime_store_new(wasm_engine_t *engine, void *data, void (*finalizer)(void *));
wasmtime_context_t *wasmtime_store_context(wasmtime_store_t *store);
void *wasmtime_context_get_data(const wasmtime_context_t *context);
void wasmtime_store_limiter(wasmtime_store_t *store, int64_t memory_size, int64_t table_elements, int64_t instances, int64_t tables, int64_t memories);
void wasmtime_store_delete(wasmtime_store_t *store);
wasmtime_error_t *wasmtime_context_set_fuel(wasmtime_context_t *store, uint64_t fuel);
wasmtime_error_t *wasmtime_context_get_fuel(const wasmtime_context_t *context, uint64_t *fuel);
wasmtime_error_t *wasmtime_context_set_wasi(wasmtime_context_t *context, wasi_config_t *wasi);
void wasmtime_context_set_epoch_deadline(wasmtime_context_t *context, uint64_t ticks_beyond_current);
void wasmtime_store_epoch_deadline_callback(
    wasmtime_store_t *store,
    wasmtime_error_t *(*func)(wasmtime_context_t *context, void *data, uint64_t *epoch_deadline_delta, wasmtime_update_deadline_kind_t *update_kind),
    void *data, void (*finalizer)(void *));
wasmtime_error_t *wasmtime_func_call(wasmtime_context_t *store, const wasmtime_func_t *func, const wasmtime_val_t *args, size_t nargs, wasmtime_val_t *results, size_t nresults, wasm_trap_t **trap);
size_t wasmtime_memory_data_size(const wasmtime_context_t *store, const wasmtime_memory_t *memory);

// wasi.h
wasi_config_t *wasi_config_new();
void wasi_config_delete(wasi_config_t *);
bool wasi_config_set_argv(wasi_config_t *config, size_t argc, const char *argv[]);
bool wasi_config_set_env(wasi_config_t *config, size_t envc, const char *names[], const char *values[]);
void wasi_config_set_stdin_bytes(wasi_config_t *config, wasm_byte_vec_t *binary);
void wasi_config_inherit_stdin(wasi_config_t *config);
void wasi_config_inherit_stdout(wasi_config_t *config);
void wasi_config_inherit_stderr(wasi_config_t *config);
void wasi_config_inherit_env(wasi_config_t *config);
void wasi_config_set_stdout_custom(wasi_config_t *config, ptrdiff_t (*callback)(void *, const unsigned char *, size_t), void *data, void (*finalizer)(void *));
void wasi_config_set_stderr_custom(wasi_config_t *config, ptrdiff_t (*callback)(void *, const unsigned char *, size_t), void *data, void (*finalizer)(void *));
bool wasi_config_preopen_dir(wasi_config_t *config, const char *host_path, const char *guest_path, wasi_dir_perms dir_perms, wasi_file_perms file_perms);

#endif
