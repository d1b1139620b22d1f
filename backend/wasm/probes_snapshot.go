package wasm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/snapshot"
)

// The snapshot rows on wasm: a pre-initialised module (ADR 0019) is the
// wasm backend's golden snapshot, and every instance of it a clone.

// preinitWAT is the rows' guest, unique per run (the nonce, so no artifact
// of an earlier run is reused): its init export copies whatever
// environment it is given to [1024, 2048); _start prints that region and
// [4096, 5120), then copies its own environment to [4096, 5120), where an
// instance that inherited another's memory would find it.
const preinitWAT = `(module
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $sizes (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_get" (func $get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 8000) "%s")
  (func $env (param $ptrs i32) (param $buf i32)
    (drop (call $sizes (i32.const 0) (i32.const 4)))
    (if (i32.le_u (i32.load (i32.const 4)) (i32.const 1000))
      (then (drop (call $get (local.get $ptrs) (local.get $buf))))))
  (func (export "wizer.initialize") (call $env (i32.const 16) (i32.const 1024)))
  (func (export "_start")
    (i32.store (i32.const 200) (i32.const 1024)) (i32.store (i32.const 204) (i32.const 1024))
    (drop (call $fd_write (i32.const 1) (i32.const 200) (i32.const 1) (i32.const 216)))
    (i32.store (i32.const 200) (i32.const 4096)) (i32.store (i32.const 204) (i32.const 1024))
    (drop (call $fd_write (i32.const 1) (i32.const 200) (i32.const 1) (i32.const 216)))
    (call $env (i32.const 300) (i32.const 4096))))`

// preinitRun is what rows 85 and 86 read from one run: tenant A's and then
// tenant B's output, and the artifact A's run left.
type preinitRun struct {
	a, b      *sandbox.Result
	artifacts []string // what is wrong with the pre-initialised module's files
}

func (e *probeEnv) preinitRun(ctx context.Context) (*preinitRun, error) {
	if _, err := e.backend(); err != nil {
		return nil, err
	}
	mod, err := wat2wasm(fmt.Sprintf(preinitWAT, "nonce-"+strings.TrimPrefix(e.canary, "WOVYR-CANARY-")))
	if err != nil {
		return nil, err
	}
	r := &preinitRun{}
	envA := &sandbox.Invocation{Workload: sandbox.Workload{Env: []string{"C=" + e.canary}}}
	if r.a, err = e.runModule(ctx, mod, envA); err != nil {
		return nil, err
	}
	envB := &sandbox.Invocation{Workload: sandbox.Workload{Env: []string{"C=tenant-b"}}}
	if r.b, err = e.runModule(ctx, mod, envB); err != nil {
		return nil, err
	}
	key := e.b.pre.key(digest(mod), WizerInit)
	g, err := e.b.pre.store.Find(key)
	if err != nil {
		return nil, fmt.Errorf("the pre-initialised module: %w", err)
	}
	r.artifacts = snapshot.Audit(g.Dir, []byte(e.canary))
	if _, err := e.b.pre.store.Reconcile(Name, func(k snapshot.Key) bool { return k != key }); err != nil {
		return nil, err
	}
	if _, err := os.Stat(g.Dir); !os.IsNotExist(err) {
		r.artifacts = append(r.artifacts, "the artifact outlived its invalidation")
	}
	return r, nil
}

var probePreinitResidue = Probe{
	ID: 85, Name: "canary residue across pre-initialised instances",
	// Control: init runs with the first invocation's environment.
	weakness: WeakTenantInit,
	run: func(ctx context.Context, e *probeEnv) (string, string, bool) {
		r, err := e.preinitRun(ctx)
		if err != nil {
			return failed(err)
		}
		const tried = "tenant A runs a pre-initialised module with a canary in its env and copies it into its memory; tenant B, next, prints the init's and the previous run's memory"
		if len(r.a.Stdout) != 2048 || len(r.b.Stdout) != 2048 {
			return tried, fmt.Sprintf("guests printed %d and %d bytes, want 2048 each (%s / %s)", len(r.a.Stdout), len(r.b.Stdout), r.a.Error, r.b.Error), false
		}
		if bytes.Contains(r.b.Stdout, []byte(e.canary)) {
			return tried, "B's memory holds A's canary", false
		}
		return tried, "no canary in B's memory", true
	},
}

var probePreinitArtifacts = Probe{
	ID: 86, Name: "pre-initialised module artifacts",
	weakness: WeakTenantInit,
	run: func(ctx context.Context, e *probeEnv) (string, string, bool) {
		r, err := e.preinitRun(ctx)
		if err != nil {
			return failed(err)
		}
		const tried = "modes and owner of the pre-initialised module's directory and files after tenant A's run, a canary in them, and the directory after invalidation"
		if len(r.artifacts) > 0 {
			return tried, strings.Join(r.artifacts, "; "), false
		}
		return tried, "0700 directory, 0600 files, root's, no canary, removed at invalidation", true
	},
}
