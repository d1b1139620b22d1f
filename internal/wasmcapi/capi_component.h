// capi_component.h declares the part of the Wasmtime C API's component
// model (v39.0.1, wasmtime/component/*.h) that wovyr uses. As in capi.h, the
// declarations are copied and each struct body sits behind the real header's
// include guard, so TestHeaderMatches checks them against the originals.
#ifndef WOVYR_CAPI_COMPONENT_H
#define WOVYR_CAPI_COMPONENT_H
#include "capi.h"

typedef struct wasmtime_component_t wasmtime_component_t;
typedef struct wasmtime_component_linker_t wasmtime_component_linker_t;
typedef struct wasmtime_component_export_index_t wasmtime_component_export_index_t;
typedef struct wasmtime_component_type_t wasmtime_component_type_t;
typedef struct wasmtime_component_instance_type wasmtime_component_instance_type_t;
typedef struct wasmtime_component_func_type_t wasmtime_component_func_type_t;
typedef struct wasmtime_component_list_type wasmtime_component_list_type_t;
typedef struct wasmtime_component_record_type wasmtime_component_record_type_t;
typedef struct wasmtime_component_tuple_type wasmtime_component_tuple_type_t;
typedef struct wasmtime_component_variant_type wasmtime_component_variant_type_t;
typedef struct wasmtime_component_enum_type wasmtime_component_enum_type_t;
typedef struct wasmtime_component_option_type wasmtime_component_option_type_t;
typedef struct wasmtime_component_result_type wasmtime_component_result_type_t;
typedef struct wasmtime_component_flags_type wasmtime_component_flags_type_t;
typedef struct wasmtime_component_resource_type wasmtime_component_resource_type_t;
typedef struct wasmtime_component_resource_any wasmtime_component_resource_any_t;
typedef struct wasmtime_component_future_type wasmtime_component_future_type_t;
typedef struct wasmtime_component_stream_type wasmtime_component_stream_type_t;
typedef struct wasmtime_module_type wasmtime_module_type_t;
typedef struct wasm_functype_t wasm_functype_t;

#ifndef WASM_H
typedef float float32_t;
typedef double float64_t;
#endif

// Value types (types/val.h). Note the kinds are numbered differently from
// the value kinds below (s8 is 1 here, u8 is 1 there).
#define WOVYR_VALTYPE_OWN 21
#define WOVYR_VALTYPE_BORROW 22
#define WOVYR_VALTYPE_ERROR_CONTEXT 25
#ifndef WASMTIME_COMPONENT_TYPES_VAL_H
typedef uint8_t wasmtime_component_valtype_kind_t;
typedef union wasmtime_component_valtype_union {
  wasmtime_component_list_type_t *list;
  wasmtime_component_record_type_t *record;
  wasmtime_component_tuple_type_t *tuple;
  wasmtime_component_variant_type_t *variant;
  wasmtime_component_enum_type_t *enum_;
  wasmtime_component_option_type_t *option;
  wasmtime_component_result_type_t *result;
  wasmtime_component_flags_type_t *flags;
  wasmtime_component_resource_type_t *own;
  wasmtime_component_resource_type_t *borrow;
  wasmtime_component_future_type_t *future;
  wasmtime_component_stream_type_t *stream;
} wasmtime_component_valtype_union_t;
typedef struct wasmtime_component_valtype_t {
  wasmtime_component_valtype_kind_t kind;
  wasmtime_component_valtype_union_t of;
} wasmtime_component_valtype_t;
#endif

// Items (types/component.h).
#define WOVYR_ITEM_COMPONENT_INSTANCE 1
#define WOVYR_ITEM_COMPONENT_FUNC 3
#ifndef WASMTIME_COMPONENT_TYPES_COMPONENT_H
typedef uint8_t wasmtime_component_item_kind_t;
typedef union wasmtime_component_item_union {
  wasmtime_component_type_t *component;
  wasmtime_component_instance_type_t *component_instance;
  wasmtime_module_type_t *module;
  wasmtime_component_func_type_t *component_func;
  wasmtime_component_resource_type_t *resource;
  wasm_functype_t *core_func;
  wasmtime_component_valtype_t type;
} wasmtime_component_item_union_t;
typedef struct wasmtime_component_item_t {
  wasmtime_component_item_kind_t kind;
  wasmtime_component_item_union_t of;
} wasmtime_component_item_t;
#endif

#ifndef WASMTIME_COMPONENT_INSTANCE_H
typedef struct wasmtime_component_instance {
  uint64_t store_id;
  uint32_t __private;
} wasmtime_component_instance_t;
#endif

#ifndef WASMTIME_COMPONENT_FUNC_H
typedef struct wasmtime_component_func {
  struct {
    uint64_t store_id;
    uint32_t __private1;
  };
  uint32_t __private2;
} wasmtime_component_func_t;
#endif

// Values (val.h).
#define WOVYR_CVAL_BOOL 0
#define WOVYR_CVAL_S8 1
#define WOVYR_CVAL_U8 2
#define WOVYR_CVAL_S16 3
#define WOVYR_CVAL_U16 4
#define WOVYR_CVAL_S32 5
#define WOVYR_CVAL_U32 6
#define WOVYR_CVAL_S64 7
#define WOVYR_CVAL_U64 8
#define WOVYR_CVAL_F32 9
#define WOVYR_CVAL_F64 10
#define WOVYR_CVAL_CHAR 11
#define WOVYR_CVAL_STRING 12
#define WOVYR_CVAL_LIST 13
#define WOVYR_CVAL_RECORD 14
#define WOVYR_CVAL_TUPLE 15
#define WOVYR_CVAL_VARIANT 16
#define WOVYR_CVAL_ENUM 17
#define WOVYR_CVAL_OPTION 18
#define WOVYR_CVAL_RESULT 19
#define WOVYR_CVAL_FLAGS 20
#define WOVYR_CVAL_RESOURCE 21
#ifndef WASMTIME_COMPONENT_VAL_H
struct wasmtime_component_val;
struct wasmtime_component_valrecord_entry;
typedef uint8_t wasmtime_component_valkind_t;
typedef struct wasmtime_component_vallist {
  size_t size;
  struct wasmtime_component_val *data;
} wasmtime_component_vallist_t;
typedef struct wasmtime_component_valrecord {
  size_t size;
  struct wasmtime_component_valrecord_entry *data;
} wasmtime_component_valrecord_t;
typedef struct wasmtime_component_valtuple {
  size_t size;
  struct wasmtime_component_val *data;
} wasmtime_component_valtuple_t;
typedef struct wasmtime_component_valflags {
  size_t size;
  wasm_name_t *data;
} wasmtime_component_valflags_t;
typedef struct {
  wasm_name_t discriminant;
  struct wasmtime_component_val *val;
} wasmtime_component_valvariant_t;
typedef struct {
  bool is_ok;
  struct wasmtime_component_val *val;
} wasmtime_component_valresult_t;
typedef union {
  bool boolean;
  int8_t s8;
  uint8_t u8;
  int16_t s16;
  uint16_t u16;
  int32_t s32;
  uint32_t u32;
  int64_t s64;
  uint64_t u64;
  float32_t f32;
  float64_t f64;
  uint32_t character;
  wasm_name_t string;
  wasmtime_component_vallist_t list;
  wasmtime_component_valrecord_t record;
  wasmtime_component_valtuple_t tuple;
  wasmtime_component_valvariant_t variant;
  wasm_name_t enumeration;
  struct wasmtime_component_val *option;
  wasmtime_component_valresult_t result;
  wasmtime_component_valflags_t flags;
  wasmtime_component_resource_any_t *resource;
} wasmtime_component_valunion_t;
typedef struct wasmtime_component_val {
  wasmtime_component_valkind_t kind;
  wasmtime_component_valunion_t of;
} wasmtime_component_val_t;
typedef struct wasmtime_component_valrecord_entry {
  wasm_name_t name;
  wasmtime_component_val_t val;
} wasmtime_component_valrecord_entry_t;
#endif

_Static_assert(sizeof(wasmtime_component_val_t) == 32, "wasmtime_component_val_t layout");
_Static_assert(sizeof(wasmtime_component_valrecord_entry_t) == 48, "valrecord_entry layout");
_Static_assert(sizeof(wasmtime_component_valtype_t) == 16, "valtype layout");
_Static_assert(sizeof(wasmtime_component_item_t) == 24, "item layout");
_Static_assert(sizeof(wasmtime_component_instance_t) == 16, "component instance layout");
_Static_assert(sizeof(wasmtime_component_func_t) == 24, "component func layout");

// component.h
wasmtime_error_t *wasmtime_component_new(const wasm_engine_t *engine, const uint8_t *buf, size_t len, wasmtime_component_t **component_out);
wasmtime_error_t *wasmtime_component_serialize(const wasmtime_component_t *component, wasm_byte_vec_t *ret);
wasmtime_error_t *wasmtime_component_deserialize(const wasm_engine_t *engine, const uint8_t *buf, size_t len, wasmtime_component_t **component_out);
wasmtime_error_t *wasmtime_component_deserialize_file(const wasm_engine_t *engine, const char *path, wasmtime_component_t **component_out);
wasmtime_component_type_t *wasmtime_component_type(const wasmtime_component_t *component);
void wasmtime_component_delete(wasmtime_component_t *component);
wasmtime_component_export_index_t *wasmtime_component_get_export_index(const wasmtime_component_t *component, const wasmtime_component_export_index_t *instance_export_index, const char *name, size_t name_len);
void wasmtime_component_export_index_delete(wasmtime_component_export_index_t *export_index);

// types/component.h, types/instance.h, types/func.h
void wasmtime_component_type_delete(wasmtime_component_type_t *ty);
size_t wasmtime_component_type_import_count(const wasmtime_component_type_t *ty, const wasm_engine_t *engine);
bool wasmtime_component_type_import_nth(const wasmtime_component_type_t *ty, const wasm_engine_t *engine, size_t nth, const char **name_ret, size_t *name_len_ret, struct wasmtime_component_item_t *type_ret);
size_t wasmtime_component_type_export_count(const wasmtime_component_type_t *ty, const wasm_engine_t *engine);
bool wasmtime_component_type_export_nth(const wasmtime_component_type_t *ty, const wasm_engine_t *engine, size_t nth, const char **name_ret, size_t *name_len_ret, struct wasmtime_component_item_t *type_ret);
void wasmtime_component_item_delete(wasmtime_component_item_t *ptr);
size_t wasmtime_component_instance_type_export_count(const wasmtime_component_instance_type_t *ty, const wasm_engine_t *engine);
bool wasmtime_component_instance_type_export_nth(const wasmtime_component_instance_type_t *ty, const wasm_engine_t *engine, size_t nth, const char **name_ret, size_t *name_len_ret, struct wasmtime_component_item_t *type_ret);
size_t wasmtime_component_func_type_param_count(const wasmtime_component_func_type_t *ty);
bool wasmtime_component_func_type_param_nth(const wasmtime_component_func_type_t *ty, size_t nth, const char **name_ret, size_t *name_len_ret, wasmtime_component_valtype_t *type_ret);
bool wasmtime_component_func_type_result(const wasmtime_component_func_type_t *ty, wasmtime_component_valtype_t *type_ret);

// types/val.h
void wasmtime_component_valtype_delete(wasmtime_component_valtype_t *ptr);
void wasmtime_component_list_type_element(const wasmtime_component_list_type_t *ty, struct wasmtime_component_valtype_t *type_ret);
size_t wasmtime_component_record_type_field_count(const wasmtime_component_record_type_t *ty);
bool wasmtime_component_record_type_field_nth(const wasmtime_component_record_type_t *ty, size_t nth, const char **name_ret, size_t *name_len_ret, struct wasmtime_component_valtype_t *type_ret);
size_t wasmtime_component_tuple_type_types_count(const wasmtime_component_tuple_type_t *ty);
bool wasmtime_component_tuple_type_types_nth(const wasmtime_component_tuple_type_t *ty, size_t nth, struct wasmtime_component_valtype_t *type_ret);
size_t wasmtime_component_variant_type_case_count(const wasmtime_component_variant_type_t *ty);
bool wasmtime_component_variant_type_case_nth(const wasmtime_component_variant_type_t *ty, size_t nth, const char **name_ret, size_t *name_len_ret, bool *has_payload_ret, struct wasmtime_component_valtype_t *payload_ret);
size_t wasmtime_component_enum_type_names_count(const wasmtime_component_enum_type_t *ty);
bool wasmtime_component_enum_type_names_nth(const wasmtime_component_enum_type_t *ty, size_t nth, const char **name_ret, size_t *name_len_ret);
void wasmtime_component_option_type_ty(const wasmtime_component_option_type_t *ty, struct wasmtime_component_valtype_t *type_ret);
bool wasmtime_component_result_type_ok(const wasmtime_component_result_type_t *ty, struct wasmtime_component_valtype_t *type_ret);
bool wasmtime_component_result_type_err(const wasmtime_component_result_type_t *ty, struct wasmtime_component_valtype_t *type_ret);
size_t wasmtime_component_flags_type_names_count(const wasmtime_component_flags_type_t *ty);
bool wasmtime_component_flags_type_names_nth(const wasmtime_component_flags_type_t *ty, size_t nth, const char **name_ret, size_t *name_len_ret);

// linker.h, instance.h, func.h
wasmtime_component_linker_t *wasmtime_component_linker_new(const wasm_engine_t *engine);
void wasmtime_component_linker_delete(wasmtime_component_linker_t *linker);
wasmtime_error_t *wasmtime_component_linker_add_wasip2(wasmtime_component_linker_t *linker);
typedef struct wasmtime_component_linker_instance_t wasmtime_component_linker_instance_t;
typedef wasmtime_error_t *(*wasmtime_component_func_callback_t)(
    void *, wasmtime_context_t *, const wasmtime_component_func_type_t *,
    wasmtime_component_val_t *, size_t, wasmtime_component_val_t *, size_t);
wasmtime_component_linker_instance_t *wasmtime_component_linker_root(wasmtime_component_linker_t *linker);
wasmtime_error_t *wasmtime_component_linker_instance_add_instance(wasmtime_component_linker_instance_t *linker_instance, const char *name, size_t name_len, wasmtime_component_linker_instance_t **linker_instance_out);
wasmtime_error_t *wasmtime_component_linker_instance_add_func(wasmtime_component_linker_instance_t *linker_instance, const char *name, size_t name_len, wasmtime_component_func_callback_t callback, void *data, void (*finalizer)(void *));
void wasmtime_component_linker_instance_delete(wasmtime_component_linker_instance_t *linker_instance);
wasmtime_error_t *wasmtime_component_linker_instantiate(const wasmtime_component_linker_t *linker, wasmtime_context_t *context, const wasmtime_component_t *component, wasmtime_component_instance_t *instance_out);
bool wasmtime_component_instance_get_func(const wasmtime_component_instance_t *instance, wasmtime_context_t *context, const wasmtime_component_export_index_t *export_index, wasmtime_component_func_t *func_out);
wasmtime_error_t *wasmtime_component_func_call(const wasmtime_component_func_t *func, wasmtime_context_t *context, const wasmtime_component_val_t *args, size_t args_size, wasmtime_component_val_t *results, size_t results_size);
wasmtime_error_t *wasmtime_component_func_post_return(const wasmtime_component_func_t *func, wasmtime_context_t *context);

// val.h
void wasmtime_component_vallist_new_uninit(wasmtime_component_vallist_t *out, size_t size);
void wasmtime_component_valrecord_new_uninit(wasmtime_component_valrecord_t *out, size_t size);
void wasmtime_component_valtuple_new_uninit(wasmtime_component_valtuple_t *out, size_t size);
void wasmtime_component_valflags_new_uninit(wasmtime_component_valflags_t *out, size_t size);
wasmtime_component_val_t *wasmtime_component_val_new(wasmtime_component_val_t *val);
void wasmtime_component_val_delete(wasmtime_component_val_t *value);

// val.h, types/resource.h: resources
wasmtime_component_resource_any_t *wasmtime_component_resource_any_clone(const wasmtime_component_resource_any_t *resource);
bool wasmtime_component_resource_any_owned(const wasmtime_component_resource_any_t *resource);
wasmtime_error_t *wasmtime_component_resource_any_drop(wasmtime_context_t *ctx, const wasmtime_component_resource_any_t *resource);
void wasmtime_component_resource_any_delete(wasmtime_component_resource_any_t *resource);
wasmtime_component_resource_type_t *wasmtime_component_resource_type_clone(const wasmtime_component_resource_type_t *ty);
bool wasmtime_component_resource_type_equal(const wasmtime_component_resource_type_t *a, const wasmtime_component_resource_type_t *b);
void wasmtime_component_resource_type_delete(wasmtime_component_resource_type_t *resource);

#endif
