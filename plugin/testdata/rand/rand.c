// rand.c: the rand world (rand.wit) in the canonical ABI, freestanding.
#include <stdint.h>

__attribute__((import_module("wasi:random/random@0.2.0"), import_name("get-random-u64")))
extern uint64_t get_random_u64(void);

__attribute__((export_name("roll"))) uint64_t roll(void) { return get_random_u64(); }
