package server_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/wovyr/wovyr/backend/wasm"
	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
)

// helloWat prints its argv count and "hi" through WASI fd_write.
const helloWat = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $args (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "hi\n")
  (func (export "_start")
    (drop (call $args (i32.const 32) (i32.const 36)))
    ;; "hi" only when argc == 3
    (if (i32.eq (i32.load (i32.const 32)) (i32.const 3))
      (then
        (i32.store (i32.const 0) (i32.const 16))
        (i32.store (i32.const 4) (i32.const 3))
        (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))))`

// TestWasmOverAPI: a WASI module submitted over the API runs on the wasm
// backend (the weakest certified one for trust internal) with its argv.
func TestWasmOverAPI(t *testing.T) {
	dir := t.TempDir()
	src, out := filepath.Join(dir, "hello.wat"), filepath.Join(dir, "hello.wasm")
	if err := os.WriteFile(src, []byte(helloWat), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("wat2wasm", src, "-o", out).CombinedOutput(); err != nil {
		t.Fatalf("wat2wasm (apt wabt): %v\n%s", err, b)
	}
	mod, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, testConfig(), "")
	c := h.client(aliceToken)
	inv := &sandbox.Invocation{
		Workload: sandbox.Workload{Kind: sandbox.KindWasm, Module: mod, Argv: []string{"hello", "x", "y"}},
		Policy:   sandbox.Policy{Trust: sandbox.Internal},
	}
	rec, err := c.Submit(context.Background(), inv, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != client.StateDone || rec.Result.Backend != "wasm" || string(rec.Result.Stdout) != "hi\n" {
		t.Fatalf("record %+v", rec)
	}
}

// TestMain lets this test binary double as the wasm backend's worker
// process (what `wovyr wasm-worker` is in production).
func TestMain(m *testing.M) {
	if os.Getenv(wasm.WorkerEnv) != "" {
		os.Exit(wasm.WorkerMain(context.Background(), os.Stdin, os.Stdout))
	}
	code := m.Run()
	vmEnv.Cleanup()
	os.Exit(code)
}

// preinitWat's init writes "hi\n" and its length; _start prints them.
const preinitWat = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $len (mut i32) (i32.const 0))
  (func (export "wizer.initialize")
    (i32.store (i32.const 16) (i32.const 0x0a6968))
    (global.set $len (i32.const 3)))
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (global.get $len))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    (i32.store (i32.const 16) (i32.const 0))))`

// TestWasmPreinitOverAPI: a module with an init export runs pre-initialised
// from the daemon's pool, every time from the snapshot (the first run's
// write does not reach the second); a named init export the module lacks
// is a 400 naming workload.init, with nothing recorded.
func TestWasmPreinitOverAPI(t *testing.T) {
	mod, err := wasmtime.Wat2Wasm(preinitWat)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, testConfig(), "")
	c := h.client(aliceToken)
	for i := range 2 {
		rec, err := c.Submit(context.Background(), &sandbox.Invocation{
			Workload: sandbox.Workload{Kind: sandbox.KindWasm, Module: mod, Argv: []string{"m"}},
			Policy:   sandbox.Policy{Trust: sandbox.Internal},
		}, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != client.StateDone || rec.Result.Backend != "wasm" || string(rec.Result.Stdout) != "hi\n" {
			t.Fatalf("run %d: record %+v", i, rec)
		}
	}
	_, err = c.Submit(context.Background(), &sandbox.Invocation{
		Workload: sandbox.Workload{Kind: sandbox.KindWasm, Module: mod, Argv: []string{"m"}, Init: "nope"},
		Policy:   sandbox.Policy{Trust: sandbox.Internal},
	}, 30*time.Second)
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Field != "workload.init" {
		t.Fatalf("err %v, want a 400 on workload.init", err)
	}
}

// preopenWat prints the name of its first preopen (fd 3).
const preopenWat = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_prestat_get" (func $prestat (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_prestat_dir_name" (func $name (param i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (drop (call $prestat (i32.const 3) (i32.const 64)))
    (drop (call $name (i32.const 3) (i32.const 128) (i32.load (i32.const 68))))
    (i32.store (i32.const 0) (i32.const 128))
    (i32.store (i32.const 4) (i32.load (i32.const 68)))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))`

// TestWasmWorkdirOverAPI: workload.workdir names the module's workspace
// preopen, there without files; a relative one is a 400 on
// workload.workdir.
func TestWasmWorkdirOverAPI(t *testing.T) {
	mod, err := wasmtime.Wat2Wasm(preopenWat)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, testConfig(), "")
	c := h.client(aliceToken)
	for workdir, want := range map[string]string{"": "/workspace", "/work": "/work", "/": "/"} {
		rec, err := c.Submit(context.Background(), &sandbox.Invocation{
			Workload: sandbox.Workload{Kind: sandbox.KindWasm, Module: mod, Argv: []string{"m"}, Workdir: workdir},
			Policy:   sandbox.Policy{Trust: sandbox.Internal},
		}, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != client.StateDone || string(rec.Result.Stdout) != want {
			t.Fatalf("workdir %q: record %+v", workdir, rec)
		}
	}
	_, err = c.Submit(context.Background(), &sandbox.Invocation{
		Workload: sandbox.Workload{Kind: sandbox.KindWasm, Module: mod, Argv: []string{"m"}, Workdir: "work"},
		Policy:   sandbox.Policy{Trust: sandbox.Internal},
	}, 30*time.Second)
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Field != "workload.workdir" {
		t.Fatalf("err %v, want a 400 on workload.workdir", err)
	}
}
