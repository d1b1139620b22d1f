package wasm

import (
	"bytes"
	"testing"

	"github.com/wovyr/wovyr/snapshot/snapshottest"
)

// randWAT's init draws 16 bytes from random_get into [64, 80); _start
// draws 16 more into [80, 96) and prints both.
const randWAT = `(module
  (import "wasi_snapshot_preview1" "random_get" (func $random (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "wizer.initialize") (drop (call $random (i32.const 64) (i32.const 16))))
  (func (export "_start")
    (drop (call $random (i32.const 80) (i32.const 16)))
    (i32.store (i32.const 0) (i32.const 64)) (i32.store (i32.const 4) (i32.const 32))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))`

// TestPreinitInstancesAreUnique is BATTERY 87 for wasm clones, at scale
// (WOVYR_SOAK_CLONES instances; 100 by default, a few ms): every instance
// of a pre-initialised module draws its own random_get bytes, and every one
// shares what init drew, by design (ADR 0019).
func TestPreinitInstancesAreUnique(t *testing.T) {
	n := snapshottest.SoakClones(t, 100)
	b := privateBackend(t)
	mod := mustWat(t, randWAT)
	seen := map[string]int{}
	var initDraw []byte
	for i := range n {
		res := runInit(t, b, mod, "")
		if len(res.Stdout) != 32 {
			t.Fatalf("instance %d printed %d bytes (%s)", i, len(res.Stdout), res.Error)
		}
		if i == 0 {
			initDraw = res.Stdout[:16]
		} else if !bytes.Equal(res.Stdout[:16], initDraw) {
			t.Fatalf("instance %d does not start from the pre-initialised draw: %x, want %x", i, res.Stdout[:16], initDraw)
		}
		own := string(res.Stdout[16:])
		if j, dup := seen[own]; dup || own == string(initDraw) {
			t.Fatalf("instance %d drew %x, as instance %d (or init) did", i, own, j)
		}
		seen[own] = i
	}
	if b.pre.built.Load() != 1 {
		t.Fatalf("pre-initialised %d times, want once", b.pre.built.Load())
	}
}
