package wasm

import (
	"errors"
	"reflect"
	"testing"

	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/sandbox"
)

// fuzzValidateBytes bounds the modules FuzzModuleIntake hands Wasmtime's
// validator: validation is linear, but the fuzzer needs many per second.
const fuzzValidateBytes = 64 << 10

// FuzzModuleIntake feeds the module intake what a tenant could send: the
// init-export check the API runs before anything starts (initExportOf) and
// the reader pre-initialisation rewrites modules with (inspectModule). A
// refusal of an init export is bad-input naming workload.init; the reader
// refuses with errMalformed or errUnsupported only, and what it reads
// encodes back to what it read. Against Wasmtime's validator: a module it
// accepts has sections and exports the reader can follow, and the
// instrumented copy of an inspectable valid module is valid too.
func FuzzModuleIntake(f *testing.F) {
	for _, src := range []string{
		`(module)`,
		`(module (memory (export "memory") 1) (func (export "_start")))`,
		`(module (memory 1 2) (global (mut i32) (i32.const 7)) (global i64 (i64.const -1))
		  (global (mut f32) (f32.const 1)) (global (mut f64) (f64.const 2))
		  (func (export "wizer.initialize")) (func (export "_start")) (data (i32.const 16) "hi"))`,
		`(module (func (export "_initialize")) (func (export "wizer.initialize")) (start 0))`,
		`(module (global (export "wizer.initialize") i32 (i32.const 0)))`,
		`(module (import "env" "mem" (memory 1)) (func (export "wizer.initialize")))`,
		`(module (import "env" "g" (global i32)) (global i32 (global.get 0)))`,
		`(module (import "wasi_snapshot_preview1" "proc_exit" (func (param i32))) (func (export "_start")))`,
		`(module (memory 1) (data "passive") (func (export "wizer.initialize")))`,
		`(module (memory 1 1 shared))`,
		`(module (memory i64 1))`,
		`(module (func (export "__wizer_global_0")))`,
		`(module (global (mut v128) (v128.const i64x2 1 2)) (func (export "wizer.initialize")))`,
		`(module (global (mut funcref) (ref.null func)))`,
		`(module (global i32 (i32.add (i32.const 1) (i32.const 2))))`,
		`(module (table 1 funcref) (elem (i32.const 0) 0) (func) (func (export "wizer.initialize")))`,
		`(module (memory 1) (func (export "f") (drop (memory.size))) (@custom "name" "x"))`,
		`(module (memory 1) (tag) (global (mut i32) (i32.const 0)))`,
	} {
		wasm, err := wat2wasm(src)
		if err != nil {
			f.Fatalf("%s: %v", src, err)
		}
		f.Add(wasm, "")
		f.Add(wasm, WizerInit)
	}
	for _, raw := range [][]byte{
		nil,
		[]byte("\x00asm"),
		[]byte("\x00asm\x01\x00\x00\x00"),
		[]byte("\x00asm\x0d\x00\x01\x00"), // a component
		[]byte("\x00asm\x01\x00\x00\x00\x07\xff\xff\xff\xff\x0f"),     // a section longer than the module
		[]byte("\x00asm\x01\x00\x00\x00\x07\x05\xff\xff\xff\xff\x0f"), // an export count of 2^32-1
		[]byte("\x00asm\x01\x00\x00\x00\x07\x80\x80\x80\x80\x80\x01"), // an over-long LEB128
		[]byte("\x7fELF"),
		[]byte("(module)"),
	} {
		f.Add(raw, "x")
	}
	engine, err := wasmcapi.NewEngine(wasmcapi.EngineConfig{NoPooling: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(engine.Close)
	f.Fuzz(func(t *testing.T, wasm []byte, named string) {
		init, err := initExportOf(wasm, named)
		switch {
		case err != nil && (sandbox.ClassOf(err) != sandbox.BadInput || sandbox.FieldOf(err) != "workload.init"):
			t.Fatalf("initExportOf = %v, want bad-input naming workload.init", err)
		case err == nil && init != "" && init != named && init != WizerInit:
			t.Fatalf("initExportOf(%q) chose %q", named, init)
		}
		m, inspectErr := inspectModule(wasm)
		if inspectErr != nil && !errors.Is(inspectErr, errMalformed) && !errors.Is(inspectErr, errUnsupported) {
			t.Fatalf("inspectModule = %v, want errMalformed or errUnsupported", inspectErr)
		}
		if inspectErr == nil {
			roundTrip(t, m)
		}
		if len(wasm) > fuzzValidateBytes || engine.Validate(wasm) != nil {
			return
		}
		secs, err := parseSections(wasm)
		if err != nil {
			t.Fatalf("a valid module's sections: %v", err)
		}
		for _, s := range secs {
			if s.id == secExport {
				if _, err := parseExports(s.body); err != nil {
					t.Fatalf("a valid module's exports: %v", err)
				}
			}
		}
		if inspectErr == nil {
			if err := engine.Validate(m.instrumented()); err != nil {
				t.Fatalf("the instrumented copy of a valid module is invalid: %v", err)
			}
		}
	})
}

// roundTrip asserts that what inspectModule read encodes back to the same.
func roundTrip(t *testing.T, m *moduleInfo) {
	t.Helper()
	es, err := parseExports(encodeExports(m.exports))
	if err != nil || len(es)+len(m.exports) > 0 && !reflect.DeepEqual(es, m.exports) {
		t.Fatalf("exports %v re-read as %v (%v)", m.exports, es, err)
	}
	ms, err := parseMemories(encodeMemories(m.memories))
	if err != nil || len(ms)+len(m.memories) > 0 && !reflect.DeepEqual(ms, m.memories) {
		t.Fatalf("memories %v re-read as %v (%v)", m.memories, ms, err)
	}
	gs, err := parseGlobals(encodeGlobals(m.globals))
	if err != nil || len(gs)+len(m.globals) > 0 && !reflect.DeepEqual(gs, m.globals) {
		t.Fatalf("globals %v re-read as %v (%v)", m.globals, gs, err)
	}
}
