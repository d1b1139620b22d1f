package wasm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/sandbox"
)

// initBounds bound the one init run of a module. They are fixed per backend,
// never the invocation's, so that no tenant's limits shape an artifact that
// others start from; they are in the pre-initialisation key.
type initBounds struct {
	wall   time.Duration
	memory int64
	// env is the init's environment: none, but for the WeakTenantInit
	// positive control, which hands it the first invocation's.
	env []string
}

// preinitialise runs init in the module and returns the pre-initialised
// module. The run is tenant-neutral: WASI preview1 with no arguments, no
// environment, empty stdin, stdout and stderr discarded and no directory.
// Clocks and random_get are the host's, so whatever init draws from them is
// the same in every instance of the result (by design, as with Wizer; docs
// say so). Errors are BadInput (the module cannot be, or failed to be,
// pre-initialised), Timeout (init outran its bound) or Killed.
func preinitialise(ctx context.Context, wasm []byte, init string, bound initBounds) ([]byte, error) {
	bad := func(err error) error {
		if !errors.Is(err, errUnsupported) {
			err = fmt.Errorf("%w: %w", errUnsupported, err)
		}
		return sandbox.Errorf(sandbox.BadInput, "workload.init", "the module %v", err)
	}
	m, err := inspectModule(wasm)
	if err != nil {
		return nil, bad(err)
	}
	cfg := wasmtime.NewConfig()
	cfg.SetEpochInterruption(true)
	engine := wasmtime.NewEngineWithConfig(cfg)
	defer engine.Close()
	mod, err := wasmtime.NewModule(engine, m.instrumented())
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BadInput, err, "invalid wasm module")
	}
	defer mod.Close()
	if err := checkInitType(mod, init); err != nil {
		return nil, sandbox.Errorf(sandbox.BadInput, "workload.init", "%v", err)
	}
	store := wasmtime.NewStore(engine)
	defer store.Close()
	wasi := wasmtime.NewWasiConfig()
	if len(bound.env) > 0 {
		var keys, vals []string
		for _, kv := range bound.env {
			k, v, _ := strings.Cut(kv, "=")
			keys, vals = append(keys, k), append(vals, v)
		}
		wasi.SetEnv(keys, vals)
	}
	store.SetWasi(wasi)
	store.Limiter(bound.memory, -1, -1, -1, -1)
	store.SetEpochDeadline(1)
	timer := time.AfterFunc(bound.wall, engine.IncrementEpoch)
	defer timer.Stop()
	stop := context.AfterFunc(ctx, engine.IncrementEpoch)
	defer stop()
	failed := func(what string, err error) error {
		if ctx.Err() != nil {
			return sandbox.Wrap(sandbox.Killed, ctx.Err(), "wasm: pre-initialisation cancelled")
		}
		var trap *wasmtime.Trap
		if errors.As(err, &trap) && trap.Code() != nil && *trap.Code() == wasmtime.Interrupt {
			return sandbox.Errorf(sandbox.Timeout, "workload.init", "the module's %q export ran longer than the %s pre-initialisation bound", init, bound.wall)
		}
		var we *wasmtime.Error
		if errors.As(err, &we) {
			if code, ok := we.ExitStatus(); ok {
				return sandbox.Errorf(sandbox.BadInput, "workload.init", "%s exited with status %d", what, code)
			}
		}
		return sandbox.Errorf(sandbox.BadInput, "workload.init", "%s trapped: %s", what, oneLineOf(err))
	}

	linker := wasmtime.NewLinker(engine)
	defer linker.Close()
	if err := linker.DefineWasi(); err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "wasm: pre-initialisation linker")
	}
	inst, err := linker.Instantiate(store, mod)
	if err != nil {
		return nil, failed("instantiating the module", err)
	}
	// A WASI reactor initialises itself first, as under Wizer.
	ranReactor := false
	if f := exportedFunc(store, inst, reactorInit); f != nil && isNullary(f.Type(store)) {
		ranReactor = true
		if _, err := f.Call(store); err != nil {
			return nil, failed("the reactor's "+strconv.Quote(reactorInit), err)
		}
	}
	if !(ranReactor && init == reactorInit) {
		if _, err := exportedFunc(store, inst, init).Call(store); err != nil {
			return nil, failed("the module's "+strconv.Quote(init)+" export", err)
		}
	}
	st, err := readState(store, inst, m)
	if err != nil {
		return nil, bad(err)
	}
	return m.rewrite(st, init, ranReactor), nil
}

// checkInitType checks init's type before anything runs, with Wizer's words.
func checkInitType(mod *wasmtime.Module, init string) error {
	for _, e := range mod.Exports() {
		if e.Name() != init {
			continue
		}
		ft := e.Type().FuncType()
		if ft == nil {
			return fmt.Errorf("the module's %q export is not a function", init)
		}
		if len(ft.Params()) != 0 || len(ft.Results()) != 0 {
			return fmt.Errorf("the module's %q function export does not have type [] -> []", init)
		}
		return nil
	}
	return fmt.Errorf("the module does not have a %q export", init)
}

func exportedFunc(store *wasmtime.Store, inst *wasmtime.Instance, name string) *wasmtime.Func {
	if e := inst.GetExport(store, name); e != nil {
		return e.Func()
	}
	return nil
}

func isNullary(ft *wasmtime.FuncType) bool { return len(ft.Params()) == 0 && len(ft.Results()) == 0 }

// readState reads every defined global and memory through the
// instrumentation's exports.
func readState(store *wasmtime.Store, inst *wasmtime.Instance, m *moduleInfo) (*state, error) {
	st := &state{}
	for i, g := range m.globals {
		e := inst.GetExport(store, "__wizer_global_"+strconv.Itoa(i))
		if e == nil || e.Global() == nil {
			return nil, fmt.Errorf("global %d is not readable", i)
		}
		init, ok := constOf(e.Global().Get(store), g.valType)
		if !ok {
			if g.mutable {
				return nil, fmt.Errorf("global %d has a type the snapshot cannot hold", i)
			}
			init = g.init // an immutable reference keeps its initialiser
		}
		st.globals = append(st.globals, init)
	}
	mems := make([][]byte, len(m.memories))
	for i := range m.memories {
		e := inst.GetExport(store, "__wizer_memory_"+strconv.Itoa(i))
		if e == nil || e.Memory() == nil {
			return nil, fmt.Errorf("memory %d is not readable", i)
		}
		mem := e.Memory()
		st.memPages = append(st.memPages, mem.Size(store))
		mems[i] = mem.UnsafeData(store)
		st.segments = append(st.segments, segmentsOf(uint32(i), mems[i])...)
	}
	st.segments = limitSegments(st.segments, mems)
	for i := range st.segments { // the memory goes with the store
		st.segments[i].data = bytes.Clone(st.segments[i].data)
	}
	return st, nil
}

// constOf is the constant expression that yields v.
func constOf(v wasmtime.Val, valType byte) ([]byte, bool) {
	var w writer
	switch valType {
	case valI32:
		w.WriteByte(0x41)
		w.sleb(int64(v.I32()))
	case valI64:
		w.WriteByte(0x42)
		w.sleb(v.I64())
	case valF32:
		w.WriteByte(0x43)
		w.Write(binary.LittleEndian.AppendUint32(nil, math.Float32bits(v.F32())))
	case valF64:
		w.WriteByte(0x44)
		w.Write(binary.LittleEndian.AppendUint64(nil, math.Float64bits(v.F64())))
	default:
		return nil, false
	}
	w.WriteByte(0x0b)
	return w.Bytes(), true
}

// oneLineOf is a Wasmtime error in one line: a trap's message, or an
// error's headline and causes, without the backtraces.
func oneLineOf(err error) string {
	return strings.TrimPrefix(wasmcapi.OneLine(err.Error()), "error while executing at wasm backtrace:: ")
}
