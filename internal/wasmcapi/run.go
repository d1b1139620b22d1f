package wasmcapi

/*
#include <stdlib.h>
#include "run.h"
*/
import "C"

import (
	"context"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"
)

// End says how a run ended.
type End int

// How a run can end; the values mirror run.h.
const (
	EndExit        End = C.WOVYR_END_EXIT        // _start returned or proc_exit was called
	EndTrap        End = C.WOVYR_END_TRAP        // a wasm trap (TrapCode says which)
	EndTimeout     End = C.WOVYR_END_TIMEOUT     // the wall deadline passed
	EndCancelled   End = C.WOVYR_END_CANCELLED   // the context was cancelled
	EndInstantiate End = C.WOVYR_END_INSTANTIATE // instantiation failed
	EndNoStart     End = C.WOVYR_END_NO_START    // no _start export
	EndHostError   End = C.WOVYR_END_HOST_ERROR  // a host error other than exit
	EndSetup       End = C.WOVYR_END_SETUP       // WASI setup failed
)

// Trap codes that callers classify.
const (
	TrapStackOverflow = C.WOVYR_TRAP_STACK_OVERFLOW
	TrapInterrupt     = C.WOVYR_TRAP_INTERRUPT
	TrapOutOfFuel     = C.WOVYR_TRAP_OUT_OF_FUEL
)

// Preopen grants the guest one host directory.
type Preopen struct {
	Host  string // host path; the caller confines and creates it
	Guest string // the name the guest sees, e.g. "/workspace"
	Write bool   // read-write when true, read-only otherwise
}

// Spec is one run's inputs. The zero value of each field is documented.
type Spec struct {
	Argv     []string // argv exactly as the guest sees it (argv[0] included)
	Env      []string // KEY=VALUE, exactly; nothing is inherited
	Stdin    []byte   // the guest's whole stdin; nil means empty
	Preopens []Preopen
	Fuel     uint64        // zero: unmetered
	Memory   int64         // linear memory bytes per store; <= 0: unlimited (pool slot size)
	Tables   int64         // table elements per store; <= 0: unlimited (pool limit)
	Wall     time.Duration // zero: no deadline (positive controls only); cancellation still works
	Output   int           // bytes kept per stream
	// InheritStdio passes this process's stdin/stdout/stderr to the guest
	// (the wasm-exec runner); Stdin and Output are then ignored.
	InheritStdio bool
	// InheritEnv exposes this process's environment. Only the battery's
	// positive controls set it, to prove the env probe can fail.
	InheritEnv bool
}

// Outcome is what a run produced.
type Outcome struct {
	End      End
	ExitCode int
	TrapCode int // valid when End == EndTrap; -1 for a non-code trap
	Message  string
	Stdout   []byte
	Stderr   []byte
	// StdoutTruncated and StderrTruncated report output beyond Spec.Output.
	StdoutTruncated, StderrTruncated bool
	FuelUsed                         uint64 // zero when unmetered
	MemorySize                       uint64 // final size of the exported memory
	Instantiate                      time.Duration
	Run                              time.Duration // _start call to return
	Total                            time.Duration
}

// Run instantiates p in a fresh store and calls _start. It blocks until the
// guest ends; cancelling ctx stops the guest at the next epoch tick (the
// engine's ticker must be running for deadlines and cancellation to act).
func (p *InstancePre) Run(ctx context.Context, s *Spec) *Outcome {
	var blob strings.Builder
	for _, a := range s.Argv {
		blob.WriteString(a)
		blob.WriteByte(0)
	}
	for _, kv := range s.Env {
		blob.WriteString(kv)
		blob.WriteByte(0)
	}
	for _, o := range s.Preopens {
		blob.WriteString(o.Host)
		blob.WriteByte(0)
		blob.WriteString(o.Guest)
		blob.WriteByte(0)
	}
	r := (*C.wovyr_run)(C.calloc(1, C.size_t(unsafe.Sizeof(C.wovyr_run{}))))
	defer C.wovyr_run_release(r)
	cblob := C.CString(blob.String())
	defer C.free(unsafe.Pointer(cblob))
	r.blob = cblob
	r.argc, r.envc, r.npre = C.size_t(len(s.Argv)), C.size_t(len(s.Env)), C.size_t(len(s.Preopens))
	if n := len(s.Preopens); n > 0 {
		w := (*[1 << 16]C.int)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.int(0)))))[:n:n]
		defer C.free(unsafe.Pointer(&w[0]))
		for i, o := range s.Preopens {
			if o.Write {
				w[i] = 1
			}
		}
		r.pre_write = &w[0]
	}
	if len(s.Stdin) > 0 {
		in := C.CBytes(s.Stdin)
		defer C.free(in)
		r.stdin_data, r.stdin_len = (*C.char)(in), C.size_t(len(s.Stdin))
	}
	r.fuel = C.uint64_t(s.Fuel)
	r.memory_limit, r.table_limit = -1, -1
	if s.Memory > 0 {
		r.memory_limit = C.int64_t(s.Memory)
	}
	if s.Tables > 0 {
		r.table_limit = C.int64_t(s.Tables)
	}
	r.wall_ns = C.uint64_t(s.Wall.Nanoseconds())
	r.output_limit = C.size_t(s.Output)
	if s.InheritStdio {
		r.inherit_stdio = 1
	}
	if s.InheritEnv {
		r.inherit_env = 1
	}
	if ctx.Done() != nil {
		cancel := (*int32)(unsafe.Pointer(&r.cancel))
		stop := context.AfterFunc(ctx, func() { atomic.StoreInt32(cancel, 1) })
		defer stop()
	}

	C.wovyr_run_instance(p.engine.ptr, p.ptr, r)

	o := &Outcome{
		End:             End(r.end),
		ExitCode:        int(r.exit_code),
		TrapCode:        int(r.trap_code),
		Stdout:          C.GoBytes(unsafe.Pointer(r.out.data), C.int(r.out.len)),
		Stderr:          C.GoBytes(unsafe.Pointer(r.err.data), C.int(r.err.len)),
		StdoutTruncated: r.out.truncated != 0,
		StderrTruncated: r.err.truncated != 0,
		FuelUsed:        uint64(r.fuel_used),
		MemorySize:      uint64(r.memory_size),
		Instantiate:     time.Duration(r.instantiate_ns),
	}
	if r.message != nil {
		o.Message = C.GoString(r.message)
	}
	if r.start_ns != 0 {
		o.Run = time.Duration(r.ended_ns - r.start_ns)
	}
	o.Total = time.Duration(r.ended_ns - r.t0_ns)
	return o
}

// trapNames follows enum wasmtime_trap_code_enum in trap.h.
var trapNames = []string{
	"stack-overflow", "memory-out-of-bounds", "heap-misaligned", "table-out-of-bounds",
	"indirect-call-to-null", "bad-signature", "integer-overflow", "integer-division-by-zero",
	"bad-conversion-to-integer", "unreachable", "interrupt", "always-trap-adapter", "out-of-fuel",
	"atomic-wait-non-shared-memory", "null-reference", "array-out-of-bounds", "allocation-too-large",
	"cast-failure", "cannot-enter-component", "no-async-result", "disabled-opcode",
}

// TrapName names a trap code ("stack-overflow", …; "trap" when unknown).
func TrapName(code int) string {
	if code >= 0 && code < len(trapNames) {
		return trapNames[code]
	}
	return "trap"
}
