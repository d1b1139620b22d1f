package wasm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/wovyr/wovyr/internal/artifact"
	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/snapshot"
)

// Name is the backend's stable name.
const Name = "wasm"

// Backend runs WASI preview1 modules on one Wasmtime engine. It is safe for
// concurrent use; Close it when done.
type Backend struct {
	cfg   Config
	cache string    // the compiled-module cache's directory
	pre   *preinits // pre-initialised modules, beside the cache
	work  string    // parent of the per-invocation workspaces
	pool  *workers  // nil: no descriptor bound (no Config.Worker, or weakened)

	// The engine and the module cache are made on first use (started), so
	// a process that never runs wasm — `wovyr run` of a command, say —
	// pays nothing for them.
	start   sync.Once
	engine  *wasmcapi.Engine
	modules *cache
	ticker  *wasmcapi.EpochTicker
	initErr error

	closed sync.Once
	kids   children // weakened copies (battery controls)

	life   sync.RWMutex // held shared by every run, exclusively by Close
	isDown bool         // under life: Close has begun
}

// New checks cfg and makes the state directories. The engine (with its
// instance pool), the compiled-module cache and the engine's epoch ticker
// (one goroutine per Backend, stopped by Close) start on first use.
func New(cfg Config) (*Backend, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	root := filepath.Join(cfg.StateDir, "wasm")
	b := &Backend{
		cfg:   cfg,
		cache: filepath.Join(root, "cache"),
		work:  filepath.Join(root, "work"),
	}
	for _, d := range []string{b.cache, b.work} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, sandbox.Wrap(sandbox.BackendFailure, err, "wasm: state dir")
		}
	}
	st, err := snapshot.Open(preinitDir(cfg.StateDir))
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "wasm: state dir")
	}
	b.pre = &preinits{
		store: st, hash: cfg.preinitHash(), max: 4 * cfg.Modules, log: cfg.Logger, tenantInit: cfg.weak.tenantInit,
		bound:   initBounds{wall: cfg.InitWall, memory: cfg.InitMemory},
		memo:    map[string]*resolved{},
		loading: map[string]*resolving{},
	}
	if len(cfg.Worker) > 0 && !cfg.weak.noFDBound {
		b.pool = newWorkers(cfg)
	}
	return b, nil
}

// started makes the engine, the module cache and the ticker once. Callers
// hold b.life shared and have checked that Close has not begun, so Close
// never races it.
func (b *Backend) started() error {
	b.start.Do(func() {
		e, err := wasmcapi.NewEngine(b.cfg.Engine)
		if err != nil {
			b.initErr = sandbox.Wrap(sandbox.BackendFailure, err, "wasm: engine")
			return
		}
		b.engine = e
		b.modules = newCache(e, b.cache, b.cfg.Modules, b.cfg.Logger)
		b.ticker = e.StartEpochTicker(b.cfg.EpochTick)
	})
	return b.initErr
}

// begin and end bracket wasm execution, so the ticker runs only when needed.
func (b *Backend) begin() { b.ticker.Begin() }

func (b *Backend) end() { b.ticker.End() }

// Close waits for running invocations (cancel their contexts to hurry them),
// then stops the ticker and frees the cache and the engine. Runs after Close
// fail with backend-failure. It is idempotent.
func (b *Backend) Close() error {
	b.closed.Do(func() {
		b.life.Lock()
		b.isDown = true
		b.life.Unlock()
		b.kids.mu.Lock()
		for _, k := range b.kids.list {
			k.Close()
		}
		b.kids.mu.Unlock()
		if b.pool != nil {
			b.pool.close()
		}
		if b.engine != nil {
			b.ticker.Stop()
			b.modules.close()
			b.engine.Close()
		}
	})
	return nil
}

// Name implements sandbox.Backend.
func (b *Backend) Name() string { return Name }

// Strength implements sandbox.Backend.
func (b *Backend) Strength() sandbox.Strength { return sandbox.Wasm }

// Kinds implements sandbox.Backend: core wasm modules only (components later).
func (b *Backend) Kinds() []sandbox.WorkloadKind { return []sandbox.WorkloadKind{sandbox.KindWasm} }

// errNoGPU is why wasm never takes GPU work.
var errNoGPU = errors.New("WebAssembly has no GPU access")

// GPUSupport implements sandbox.GPUProvider: never, so GPU work is refused
// at Select rather than run without its devices.
func (b *Backend) GPUSupport(context.Context) error { return errNoGPU }

// probeWAT is the module Probe really runs: it writes "ok" to stdout.
const probeWAT = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "ok")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 2))
    (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))`

// Probe compiles and runs a tiny module through the same path as Run.
func (b *Backend) Probe(ctx context.Context) sandbox.Capability {
	c := sandbox.Capability{
		Version:    "wasmtime " + wasmcapi.Version,
		ConfigHash: b.cfg.hash(),
		Egress:     false,
		Features:   []string{"wasi-preview1", "fuel", "epoch-deadline", "memory-limit", "pooling-allocator", "cow-images", "module-cache", "disk-quota", "no-sockets"},
	}
	if b.pool != nil {
		c.Features = append(c.Features, "fd-bound-workers")
	}
	if b.cfg.Unprivileged {
		c.Unprivileged = true
		c.Features = slices.DeleteFunc(c.Features, func(f string) bool { return f == "disk-quota" })
		c.Features = append(c.Features, "no-workspace")
	}
	if why := b.cfg.privilegeReason(); why != "" {
		c.Reason = why
		return c
	}
	mod, err := wat2wasm(probeWAT)
	if err == nil {
		var res *sandbox.Result
		res, err = b.run(ctx, &sandbox.Invocation{
			Tenant:   "wovyr-probe",
			Workload: sandbox.Workload{Kind: sandbox.KindWasm, Module: mod, Argv: []string{"probe"}},
			Limits:   sandbox.Limits{Wall: 5 * time.Second, Memory: 1 << 20, Fuel: 1 << 20},
			Policy:   sandbox.Policy{Trust: sandbox.Internal},
		}, runOpts{})
		if err == nil && (res.Class != sandbox.OK || res.ExitCode != 0 || string(res.Stdout) != "ok") {
			err = fmt.Errorf("probe module ended %q exit %d stdout %q: %s", res.Class, res.ExitCode, res.Stdout, res.Error)
		}
	}
	if err != nil {
		c.Reason = "probe run failed: " + err.Error()
		return c
	}
	c.Available = true
	return c
}

// Prepare implements sandbox.Backend. It is cheap: the warm state is the
// backend's linked modules (InstancePre) and its pool, shared by all
// sandboxes; the instance itself is made at Run.
func (b *Backend) Prepare(ctx context.Context, tmpl sandbox.Template) (sandbox.Sandbox, error) {
	if tmpl.Kind != sandbox.KindWasm {
		return nil, sandbox.Errorf(sandbox.BadInput, "template.kind", "the wasm backend runs kind %q, not %q", sandbox.KindWasm, tmpl.Kind)
	}
	if err := ctx.Err(); err != nil {
		return nil, sandbox.Wrap(sandbox.Killed, err, "wasm: prepare")
	}
	return &wasmSandbox{b: b}, nil
}

// Reconcile removes what a crashed process left: worker processes of this
// state dir that are not this process's (WorkerEnv), workspaces (tmpfs
// mounts with source "wovyr-wasm" on StateDir/wasm/work/wovyr-wasm-*, then
// the directories), temporary cache files, pre-initialised modules half
// built by a dead process and those whose key no longer holds (another
// Wasmtime, configuration or init bound). It removes nothing else and must
// not run while this Backend runs invocations.
func (b *Backend) Reconcile(ctx context.Context) (int, error) {
	return reconcile(ctx, b.cfg.StateDir, b.pre.keep)
}

// Reconcile is Backend.Reconcile for a state dir without a Backend: it
// keeps every intact pre-initialised module, since it cannot tell which
// configuration they were made under.
func Reconcile(ctx context.Context, stateDir string) (int, error) {
	return reconcile(ctx, stateDir, nil)
}

func reconcile(ctx context.Context, stateDir string, keep func(snapshot.Key) bool) (int, error) {
	k, kerr := reconcileWorkers(stateDir)
	n, err := unmountUnder(filepath.Join(stateDir, "wasm", "work"))
	n += k
	errs := []error{kerr, err}
	if st, err := snapshot.Open(preinitDir(stateDir)); err != nil {
		errs = append(errs, err)
	} else {
		removed, err := st.Reconcile(Name, keep)
		n += len(removed)
		errs = append(errs, err)
	}
	m, _ := filepath.Glob(filepath.Join(stateDir, "wasm", "work", "wovyr-wasm-*"))
	for _, p := range m {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	k, err = artifact.RemoveStale(filepath.Join(stateDir, "wasm", "cache"))
	n += k
	errs = append(errs, err)
	return n, errors.Join(errs...)
}

// preinitDir holds the pre-initialised modules (a snapshot.Store), beside
// the compiled-module cache.
func preinitDir(stateDir string) string { return filepath.Join(stateDir, "wasm", "preinit") }

func digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
