// tally.c: the tally world (tally.wit) written straight in the component
// model's canonical ABI, freestanding, like calc.c. The guest defines the
// resource counter: its representation (rep) is an index into a static
// table plus one; the handles the host holds come from [resource-new].
#include <stdint.h>

#define EXPORT(name) __attribute__((export_name(name)))
#define IMPORT(name) __attribute__((import_module("[export]wovyr:test/counters"), import_name(name)))
#define IFACE "wovyr:test/counters#"

IMPORT("[resource-new]counter") int32_t resource_new(int32_t rep);
IMPORT("[resource-rep]counter") int32_t resource_rep(int32_t handle);
IMPORT("[resource-drop]counter") void resource_drop(int32_t handle);

extern unsigned char __heap_base;
static uintptr_t heap;

EXPORT("cabi_realloc")
void *cabi_realloc(void *old, uint32_t old_size, uint32_t align, uint32_t size) {
  if (heap == 0) heap = (uintptr_t)&__heap_base;
  heap = (heap + align - 1) & ~(uintptr_t)(align - 1);
  uintptr_t p = heap;
  heap += size;
  uint32_t have = (uint32_t)(__builtin_wasm_memory_size(0) * 65536);
  if (heap > have) __builtin_wasm_memory_grow(0, (heap - have + 65535) / 65536);
  unsigned char *src = old, *dst = (unsigned char *)p;
  for (uint32_t i = 0; old && i < old_size && i < size; i++) dst[i] = src[i];
  return (void *)p;
}

#define MAX 64
static struct { uint32_t value, used; } counters[MAX];
static uint32_t live;

static int32_t make(uint32_t start) {
  for (uint32_t i = 0; i < MAX; i++) {
    if (!counters[i].used) {
      counters[i].used = 1;
      counters[i].value = start;
      live++;
      return resource_new((int32_t)(i + 1));
    }
  }
  __builtin_trap();
}

EXPORT(IFACE "[constructor]counter") int32_t construct(uint32_t start) { return make(start); }

EXPORT(IFACE "[method]counter.incr") uint32_t incr(int32_t rep, uint32_t by) {
  return counters[rep - 1].value += by;
}

EXPORT(IFACE "[method]counter.value") uint32_t value(int32_t rep) { return counters[rep - 1].value; }

EXPORT(IFACE "[method]counter.live") uint32_t live_count(int32_t rep) { (void)rep; return live; }

EXPORT(IFACE "[method]counter.boom") void boom(int32_t rep) { (void)rep; __builtin_trap(); }

// The destructor: Wasmtime calls it when the last handle is dropped.
EXPORT(IFACE "[dtor]counter") void dtor(int32_t rep) {
  counters[rep - 1].used = 0;
  live--;
}

EXPORT(IFACE "finish") uint32_t finish(int32_t handle) {
  uint32_t v = counters[resource_rep(handle) - 1].value;
  resource_drop(handle);
  return v;
}

EXPORT(IFACE "merge") int32_t merge(int32_t a, int32_t b) {
  uint32_t sum = counters[resource_rep(a) - 1].value + counters[resource_rep(b) - 1].value;
  resource_drop(a);
  resource_drop(b);
  return make(sum);
}

static struct { uint32_t ptr, len; } ret_list;

EXPORT(IFACE "pair") void *pair(uint32_t a, uint32_t b) {
  int32_t *hs = cabi_realloc(0, 0, 4, 8);
  hs[0] = make(a);
  hs[1] = make(b);
  ret_list.ptr = (uint32_t)(uintptr_t)hs;
  ret_list.len = 2;
  return &ret_list;
}

// A borrow of the component's own resource arrives as its rep.
EXPORT(IFACE "total") uint64_t total(const int32_t *reps, uint32_t n) {
  uint64_t s = 0;
  for (uint32_t i = 0; i < n; i++) s += counters[reps[i] - 1].value;
  return s;
}
