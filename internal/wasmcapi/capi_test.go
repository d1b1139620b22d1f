package wasmcapi

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// wrapperDir is the wasmtime-go module directory (headers and library).
func wrapperDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}} {{.Version}}", "github.com/bytecodealliance/wasmtime-go/v39").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	f := strings.Fields(string(out))
	if len(f) != 2 {
		t.Fatalf("go list: %q", out)
	}
	if f[1] != "v"+Version {
		t.Fatalf("go.mod has wasmtime-go %s but Version is %s", f[1], Version)
	}
	return f[0]
}

// TestHeaderMatches compiles capi.h after the real Wasmtime headers: every
// prototype we declared must agree with the library's, and the layout and
// constant assertions must hold against the real definitions.
func TestHeaderMatches(t *testing.T) {
	inc := filepath.Join(wrapperDir(t), "build", "include")
	src := filepath.Join(t.TempDir(), "check.c")
	os.WriteFile(src, []byte(`#include <wasmtime.h>
#include "capi.h"
#include "run.h"
#include "component.h"
_Static_assert(WOVYR_VALTYPE_OWN == WASMTIME_COMPONENT_VALTYPE_OWN, "valtype");
_Static_assert(WOVYR_VALTYPE_BORROW == WASMTIME_COMPONENT_VALTYPE_BORROW, "valtype");
_Static_assert(WOVYR_OPT_LEVEL_NONE == WASMTIME_OPT_LEVEL_NONE, "opt level");
_Static_assert(WOVYR_VALTYPE_ERROR_CONTEXT == WASMTIME_COMPONENT_VALTYPE_ERROR_CONTEXT, "valtype");
_Static_assert(WOVYR_ITEM_COMPONENT_INSTANCE == WASMTIME_COMPONENT_ITEM_COMPONENT_INSTANCE, "item");
_Static_assert(WOVYR_ITEM_COMPONENT_FUNC == WASMTIME_COMPONENT_ITEM_COMPONENT_FUNC, "item");
_Static_assert(WOVYR_CVAL_BOOL == WASMTIME_COMPONENT_BOOL && WOVYR_CVAL_S8 == WASMTIME_COMPONENT_S8, "val");
_Static_assert(WOVYR_CVAL_U8 == WASMTIME_COMPONENT_U8 && WOVYR_CVAL_S16 == WASMTIME_COMPONENT_S16, "val");
_Static_assert(WOVYR_CVAL_U16 == WASMTIME_COMPONENT_U16 && WOVYR_CVAL_S32 == WASMTIME_COMPONENT_S32, "val");
_Static_assert(WOVYR_CVAL_U32 == WASMTIME_COMPONENT_U32 && WOVYR_CVAL_S64 == WASMTIME_COMPONENT_S64, "val");
_Static_assert(WOVYR_CVAL_U64 == WASMTIME_COMPONENT_U64 && WOVYR_CVAL_F32 == WASMTIME_COMPONENT_F32, "val");
_Static_assert(WOVYR_CVAL_F64 == WASMTIME_COMPONENT_F64 && WOVYR_CVAL_CHAR == WASMTIME_COMPONENT_CHAR, "val");
_Static_assert(WOVYR_CVAL_STRING == WASMTIME_COMPONENT_STRING && WOVYR_CVAL_LIST == WASMTIME_COMPONENT_LIST, "val");
_Static_assert(WOVYR_CVAL_RECORD == WASMTIME_COMPONENT_RECORD && WOVYR_CVAL_TUPLE == WASMTIME_COMPONENT_TUPLE, "val");
_Static_assert(WOVYR_CVAL_VARIANT == WASMTIME_COMPONENT_VARIANT && WOVYR_CVAL_ENUM == WASMTIME_COMPONENT_ENUM, "val");
_Static_assert(WOVYR_CVAL_OPTION == WASMTIME_COMPONENT_OPTION && WOVYR_CVAL_RESULT == WASMTIME_COMPONENT_RESULT, "val");
_Static_assert(WOVYR_CVAL_FLAGS == WASMTIME_COMPONENT_FLAGS && WOVYR_CVAL_RESOURCE == WASMTIME_COMPONENT_RESOURCE, "val");
_Static_assert(WASMTIME_COMPONENT_VALTYPE_S8 == 1 && WASMTIME_COMPONENT_VALTYPE_U8 == 5 && WASMTIME_COMPONENT_VALTYPE_FLAGS == 20, "valtypeKinds in component_type.go");
_Static_assert(WOVYR_TRAP_STACK_OVERFLOW == WASMTIME_TRAP_CODE_STACK_OVERFLOW, "trap code");
_Static_assert(WOVYR_TRAP_INTERRUPT == WASMTIME_TRAP_CODE_INTERRUPT, "trap code");
_Static_assert(WOVYR_TRAP_OUT_OF_FUEL == WASMTIME_TRAP_CODE_OUT_OF_FUEL, "trap code");
_Static_assert(WOVYR_DIR_PERMS_READ == WASMTIME_WASI_DIR_PERMS_READ, "perms");
_Static_assert(WOVYR_DIR_PERMS_WRITE == WASMTIME_WASI_DIR_PERMS_WRITE, "perms");
_Static_assert(WOVYR_FILE_PERMS_READ == WASMTIME_WASI_FILE_PERMS_READ, "perms");
_Static_assert(WOVYR_FILE_PERMS_WRITE == WASMTIME_WASI_FILE_PERMS_WRITE, "perms");
`), 0o644)
	wd, _ := os.Getwd()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	out, err := exec.Command(cc, "-std=c11", "-Werror", "-fsyntax-only", "-I", inc, "-I", wd, src).CombinedOutput()
	if err != nil {
		t.Fatalf("capi.h disagrees with the Wasmtime %s headers: %v\n%s", Version, err, out)
	}
}

const tinyWasm = "\x00asm\x01\x00\x00\x00" + // header
	"\x01\x04\x01\x60\x00\x00" + // type 0: [] -> []
	"\x03\x02\x01\x00" + // func 0: type 0
	"\x07\x0a\x01\x06_start\x00\x00" + // export "_start" = func 0
	"\x0a\x04\x01\x02\x00\x0b" // code: empty body

// prelinked compiles wasm on a fresh engine and links it; both are closed
// at the end of the test.
func prelinked(t *testing.T, wasm string, cfg EngineConfig, roundTrip bool) (*Engine, *InstancePre) {
	t.Helper()
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	m, err := e.Compile([]byte(wasm))
	if err != nil {
		t.Fatal(err)
	}
	if roundTrip { // through Serialize and Deserialize
		art, err := m.Serialize()
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
		if m, err = e.Deserialize(art); err != nil {
			t.Fatal(err)
		}
	}
	p, err := e.Prelink(m)
	m.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close) // runs before e.Close
	return e, p
}

func TestEngineRunsATinyModuleFromThePool(t *testing.T) {
	e, p := prelinked(t, tinyWasm, EngineConfig{PoolSlots: 4}, true)
	if err := e.Validate([]byte("\x00asmjunk")); err == nil {
		t.Fatal("junk validated")
	}
	for i := 0; i < 10; i++ { // more runs than pool slots: slots are returned
		o := p.Run(context.Background(), &Spec{Argv: []string{"t"}, Wall: time.Second})
		if o.End != EndExit || o.ExitCode != 0 || o.Message != "" {
			t.Fatalf("run %d: %+v", i, o)
		}
	}
}

func TestDeadlineNeedsTheTicker(t *testing.T) {
	spin := "\x00asm\x01\x00\x00\x00\x01\x04\x01\x60\x00\x00\x03\x02\x01\x00\x07\x0a\x01\x06_start\x00\x00" +
		"\x0a\x09\x01\x07\x00\x03\x40\x0c\x00\x0b\x0b" // loop br 0 end end
	e, p := prelinked(t, spin, EngineConfig{PoolSlots: 2}, false)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				e.IncrementEpoch()
			}
		}
	}()
	defer close(stop)
	o := p.Run(context.Background(), &Spec{Argv: []string{"spin"}, Wall: 50 * time.Millisecond})
	if o.End != EndTimeout {
		t.Fatalf("%+v", o)
	}
	o = p.Run(context.Background(), &Spec{Argv: []string{"spin"}, Fuel: 5000, Wall: time.Second})
	if o.End != EndTrap || o.TrapCode != TrapOutOfFuel || o.FuelUsed != 5000 {
		t.Fatalf("%+v", o)
	}
}

// Regression for issue #26 item 5: an invalid module printed Wasmtime's
// multi-line "Caused by:" dump, the magic bytes one per line.
func TestInvalidModuleIsOneLine(t *testing.T) {
	e, err := NewEngine(EngineConfig{PoolSlots: 1, MaxMemory: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, c := range []struct {
		name string
		wasm []byte
		want string
	}{
		{"text file", []byte("hello world\n"), "not a WebAssembly module: bad magic number"},
		{"short", []byte("\x00a"), "not a WebAssembly module: bad magic number"},
		{"elf", []byte("\x7fELF\x02\x01\x01"), "not a WebAssembly module: it is an ELF executable"},
		{"wat", []byte("  (module)\n"), "not a WebAssembly module: it is WebAssembly text (compile it with wat2wasm)"},
		{"bad version", []byte("\x00asm\x09\x00\x00\x00"), "failed to parse WebAssembly module: unknown binary version: 0x9 (at offset 0x4)"},
	} {
		_, err := e.Compile(c.wasm)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: Compile error %q, want %q", c.name, err, c.want)
		}
		if err := e.Validate(c.wasm); err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: Validate error %q, want one line", c.name, err)
		}
	}
}

func TestOneLineReport(t *testing.T) {
	for _, c := range []struct{ report, want string }{
		{"failed to parse WebAssembly module\n\nCaused by:\n    magic header not detected: bad magic number - expected=[\n        0x0,\n        0x61,\n    ] actual=[\n        0x68,\n    ] (at offset 0x0)\n\nStack backtrace:\n   0: anyhow::error\n",
			"failed to parse WebAssembly module: magic header not detected: bad magic number"},
		{"a\n\nCaused by:\n    0: b\n    1: c", "a: b: c"},
		{"just one line", "just one line"},
	} {
		if got := oneLine(c.report); got != c.want {
			t.Errorf("oneLine(%q) = %q, want %q", c.report, got, c.want)
		}
	}
}
