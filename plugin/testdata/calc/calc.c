// calc.c: the calc world (calc.wit) written straight in the component
// model's canonical ABI, freestanding (no libc, no WASI imports), so that
// clang alone builds the core module and `jco embed` + `jco new` wrap it.
#include <stdint.h>

#define EXPORT(name) __attribute__((export_name(name)))

extern unsigned char __heap_base;
static uintptr_t heap;

// cabi_realloc is how the host allocates guest memory for strings and
// lists it passes in: a bump allocator that never frees (one call's worth).
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

static struct { uint32_t ptr, len; } ret_str;
static struct { int32_t x, y; } ret_point;
static struct { uint8_t tag; uint32_t a, b; } ret_res; // tag, then s32 or (ptr,len)

EXPORT("add") uint32_t add(uint32_t a, uint32_t b) { return a + b; }

EXPORT("greet") void *greet(const char *name, uint32_t n) {
  static const char hello[] = "hello, ";
  char *out = cabi_realloc(0, 0, 1, 7 + n);
  for (uint32_t i = 0; i < 7; i++) out[i] = hello[i];
  for (uint32_t i = 0; i < n; i++) out[7 + i] = name[i];
  ret_str.ptr = (uint32_t)(uintptr_t)out;
  ret_str.len = 7 + n;
  return &ret_str;
}

EXPORT("sum") uint64_t sum(const uint32_t *xs, uint32_t n) {
  uint64_t s = 0;
  for (uint32_t i = 0; i < n; i++) s += xs[i];
  return s;
}

EXPORT("swap") void *swap(int32_t x, int32_t y) {
  ret_point.x = y;
  ret_point.y = x;
  return &ret_point;
}

EXPORT("area") uint32_t area(int32_t tag, uint32_t v) {
  switch (tag) {
  case 0: return 3 * v * v; // circle, pi = 3
  case 1: return v * v;     // square
  default: return 0;        // dot
  }
}

EXPORT("divide") void *divide(int32_t a, int32_t b) {
  static const char msg[] = "division by zero";
  if (b == 0) {
    ret_res.tag = 1;
    ret_res.a = (uint32_t)(uintptr_t)msg;
    ret_res.b = sizeof msg - 1;
  } else {
    ret_res.tag = 0;
    ret_res.a = (uint32_t)(a / b);
  }
  return &ret_res;
}

EXPORT("find") void *find(const uint32_t *xs, uint32_t n, uint32_t x) {
  ret_res.tag = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (xs[i] == x) { ret_res.tag = 1; ret_res.a = i; break; }
  }
  return &ret_res;
}

EXPORT("next-color") uint32_t next_color(uint32_t c) { return (c + 1) % 3; }
EXPORT("flip") uint32_t flip(uint32_t p) { return ~p & 7; }
EXPORT("half") double half(double x) { return x / 2; }
EXPORT("upper") uint32_t upper(uint32_t c) { return c >= 'a' && c <= 'z' ? c - 32 : c; }

// spin burns fuel: n iterations, or forever when n is 0 (for the epoch
// deadline); volatile keeps the loop from being folded away.
EXPORT("spin") uint64_t spin(uint64_t n) {
  volatile uint64_t i = 0;
  while (n == 0 || i < n) i++;
  return i;
}

EXPORT("crash") void crash(void) { __builtin_trap(); }

EXPORT("grow") int32_t grow(uint32_t pages) { return (int32_t)__builtin_wasm_memory_grow(0, pages); }

// counter proves instance state: it counts calls on one instance, and a
// fresh instance starts at 1 again.
static uint32_t calls;
EXPORT("counter") uint32_t counter(void) { return ++calls; }
