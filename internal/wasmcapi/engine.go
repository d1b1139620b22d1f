package wasmcapi

/*
#cgo LDFLAGS: -lm -ldl -pthread
#include <stdlib.h>
#include "run.h"
*/
import "C"

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	// The wrapper's cgo directives link the bundled libwasmtime.a.
	_ "github.com/bytecodealliance/wasmtime-go/v39"
)

// Version is the Wasmtime version of the bundled library. It is part of every
// compiled-module cache key; TestVersionMatchesModule pins it to go.mod.
const Version = "39.0.1"

// EngineConfig is everything that shapes compiled code and the instance pool.
// Its zero value is usable: every zero field takes the documented default.
type EngineConfig struct {
	// PoolSlots is how many instances (and memories, tables) may be live at
	// once across the engine. Zero means 128. When all are in use,
	// instantiation fails; callers bound concurrency below it.
	PoolSlots uint32
	// MaxMemory is the largest linear memory one instance may ever have,
	// in bytes: the size of one pool slot. Zero means 4 GiB (all of wasm32).
	MaxMemory uint64
	// MaxTableElements bounds each table. Zero means 100,000.
	MaxTableElements uint64
	// MaxWasmStack is the wasm stack budget per call, in bytes. Zero means
	// 512 KiB (Wasmtime's default); it must stay well below the host thread
	// stack.
	MaxWasmStack uint64
	// ComponentSlots is how many component instances may be live at once
	// (each also takes core instance and memory slots from PoolSlots).
	// Zero means none: the engine runs core modules only.
	ComponentSlots uint32
	// NoPooling uses the on-demand allocator instead of the pool. It exists
	// for the benchmark floor; the backend never sets it.
	NoPooling bool
	// QuickCompile compiles without Cranelift's optimizations and with its
	// single-pass register allocator: half the time for a large component
	// (a 12 MB JavaScript one, 10.1 s -> 5.3 s here), slower code. What it
	// compiles deserializes on an engine of the same config without it
	// (those flags are not among what Wasmtime checks), so it is not part
	// of CodeHash: a first load can run quick code while the optimized
	// code compiles (package plugin's tier-up).
	QuickCompile bool
}

func (c EngineConfig) withDefaults() EngineConfig {
	if c.PoolSlots == 0 {
		c.PoolSlots = 128
	}
	if c.MaxMemory == 0 {
		c.MaxMemory = 4 << 30
	}
	if c.MaxTableElements == 0 {
		c.MaxTableElements = 100_000
	}
	if c.MaxWasmStack == 0 {
		c.MaxWasmStack = 512 << 10
	}
	return c
}

// CodeHash digests what shapes compiled code (the Wasmtime version, fuel and
// epoch instrumentation, the memory layout): the compiled-module cache key.
// Pool size and runtime limits are left out, so engines that differ only in
// those (the daemon and the wasm-exec runner) share artifacts; Wasmtime
// still checks an artifact's engine settings when it is loaded.
func (c EngineConfig) CodeHash() string {
	c = c.withDefaults()
	s := fmt.Sprintf("wasmtime=%s fuel=1 epoch=1 threads=0 maxmem=%d nopool=%t", Version, c.MaxMemory, c.NoPooling)
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:16])
}

// Hash digests every setting that affects compiled code or isolation, plus the
// Wasmtime version. Fuel and epoch interruption are always on.
func (c EngineConfig) Hash() string {
	c = c.withDefaults()
	s := fmt.Sprintf("wasmtime=%s fuel=1 epoch=1 threads=0 slots=%d maxmem=%d tables=%d stack=%d nopool=%t",
		Version, c.PoolSlots, c.MaxMemory, c.MaxTableElements, c.MaxWasmStack, c.NoPooling)
	if c.ComponentSlots != 0 { // absent when zero, so core-only hashes stay as they were
		s += fmt.Sprintf(" components=%d", c.ComponentSlots)
	}
	if c.QuickCompile {
		s += " quick=1"
	}
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:16])
}

// Engine is one Wasmtime engine with its instance pool. It is safe for
// concurrent use. Close it after every Module and InstancePre made from it.
type Engine struct {
	ptr  *C.wasm_engine_t
	cfg  EngineConfig
	once sync.Once
}

// NewEngine makes an engine with fuel metering and epoch interruption on and,
// unless cfg.NoPooling, the pooling allocator with copy-on-write images.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	cfg = cfg.withDefaults()
	if cfg.MaxMemory > 4<<30 || cfg.MaxMemory < 64<<10 {
		return nil, fmt.Errorf("wasmcapi: MaxMemory %d outside [64 KiB, 4 GiB]", cfg.MaxMemory)
	}
	c := C.wasm_config_new()
	C.wasmtime_config_consume_fuel_set(c, true)
	C.wasmtime_config_epoch_interruption_set(c, true)
	C.wasmtime_config_wasm_threads_set(c, false)
	C.wasmtime_config_max_wasm_stack_set(c, C.size_t(cfg.MaxWasmStack))
	C.wasmtime_config_memory_init_cow_set(c, true)
	if cfg.QuickCompile {
		C.wasmtime_config_cranelift_opt_level_set(c, C.WOVYR_OPT_LEVEL_NONE)
		name, value := C.CString("regalloc_algorithm"), C.CString("single_pass")
		C.wasmtime_config_cranelift_flag_set(c, name, value)
		C.free(unsafe.Pointer(name))
		C.free(unsafe.Pointer(value))
	}
	if !cfg.NoPooling {
		p := C.wasmtime_pooling_allocation_config_new()
		C.wasmtime_pooling_allocation_config_total_core_instances_set(p, C.uint32_t(cfg.PoolSlots))
		C.wasmtime_pooling_allocation_config_total_memories_set(p, C.uint32_t(cfg.PoolSlots))
		C.wasmtime_pooling_allocation_config_total_tables_set(p, C.uint32_t(cfg.PoolSlots))
		C.wasmtime_pooling_allocation_config_total_component_instances_set(p, C.uint32_t(cfg.ComponentSlots))
		C.wasmtime_pooling_allocation_config_total_gc_heaps_set(p, 0)
		C.wasmtime_pooling_allocation_config_max_memory_size_set(p, C.size_t(cfg.MaxMemory))
		C.wasmtime_pooling_allocation_config_table_elements_set(p, C.size_t(cfg.MaxTableElements))
		C.wasmtime_pooling_allocation_strategy_set(c, p)
		C.wasmtime_pooling_allocation_config_delete(p)
	}
	e := C.wasm_engine_new_with_config(c) // takes ownership of c
	if e == nil {
		return nil, errors.New("wasmcapi: engine creation failed (pool reservation refused?)")
	}
	return &Engine{ptr: e, cfg: cfg}, nil
}

// Config returns the engine's configuration with defaults filled in.
func (e *Engine) Config() EngineConfig { return e.cfg }

// IncrementEpoch advances the engine's epoch: every running store checks its
// deadline. The backend calls it from one ticker per engine.
func (e *Engine) IncrementEpoch() { C.wasmtime_engine_increment_epoch(e.ptr) }

// Close frees the engine. It is idempotent.
func (e *Engine) Close() {
	e.once.Do(func() { C.wasm_engine_delete(e.ptr) })
}

// errorOf converts and frees a wasmtime_error_t.
func errorOf(err *C.wasmtime_error_t) error {
	if err == nil {
		return nil
	}
	var m C.wasm_name_t
	C.wasmtime_error_message(err, &m)
	msg := C.GoStringN(m.data, C.int(m.size))
	C.wasm_byte_vec_delete(&m)
	C.wasmtime_error_delete(err)
	return newError(msg)
}

func bytesPtr(b []byte) *C.uint8_t {
	if len(b) == 0 {
		return nil
	}
	return (*C.uint8_t)(unsafe.Pointer(&b[0]))
}
