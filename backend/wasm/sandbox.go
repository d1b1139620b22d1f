package wasm

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/sandbox"
)

// wasmSandbox runs one invocation: prepared → used → destroyed.
type wasmSandbox struct {
	b         *Backend
	mu        sync.Mutex
	used      bool
	destroyed bool
}

// Run implements sandbox.Sandbox.
func (s *wasmSandbox) Run(ctx context.Context, inv *sandbox.Invocation) (*sandbox.Result, error) {
	s.mu.Lock()
	switch {
	case s.destroyed:
		s.mu.Unlock()
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "wasm sandbox already destroyed")
	case s.used:
		s.mu.Unlock()
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "wasm sandbox already ran an invocation")
	}
	s.used = true
	s.mu.Unlock()
	return s.b.run(ctx, inv, runOpts{})
}

// Destroy implements sandbox.Sandbox. A wasm sandbox holds nothing between
// runs (the instance and workspace die with Run), so it only marks itself.
func (s *wasmSandbox) Destroy(context.Context) error {
	s.mu.Lock()
	s.destroyed = true
	s.mu.Unlock()
	return nil
}

type runOpts struct {
	inheritStdio bool   // the runner: stdio is the process's own
	workDir      string // the runner: this host dir is the workspace, instead of a fresh one
}

// run is the one code path for Sandbox.Run, Probe and ExecMain.
func (b *Backend) run(ctx context.Context, inv *sandbox.Invocation, o runOpts) (*sandbox.Result, error) {
	if err := inv.Validate(); err != nil {
		return nil, err
	}
	w := &inv.Workload
	if w.Kind != sandbox.KindWasm {
		return nil, sandbox.Errorf(sandbox.BadInput, "workload.kind", "the wasm backend runs kind %q, not %q", sandbox.KindWasm, w.Kind)
	}
	if len(w.Module) > b.cfg.MaxModuleBytes {
		return nil, sandbox.Errorf(sandbox.BadInput, "workload.module", "module is %d bytes, more than %d", len(w.Module), b.cfg.MaxModuleBytes)
	}
	if !inv.Policy.Network.DenyAll() {
		return nil, sandbox.Errorf(sandbox.Unenforceable, "policy.network", "the wasm backend has no sockets; it accepts deny-all egress only")
	}
	if err := b.CheckWorkload(w); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, sandbox.Wrap(sandbox.Killed, err, "wasm: cancelled before start")
	}
	b.life.RLock()
	defer b.life.RUnlock()
	if b.isDown {
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "wasm backend is closed")
	}
	if err := b.started(); err != nil {
		return nil, err
	}
	lim := inv.Limits.WithDefaults()
	module, d := w.Module, digest(w.Module)
	r, err := b.pre.resolve(ctx, module, d, w.Init, w.Env)
	if err != nil {
		return nil, err
	}
	if r.wasm != nil {
		module, d = r.wasm, r.digest
	}
	e, err := b.modules.acquireDigest(d, module)
	if err != nil {
		return nil, err
	}
	defer b.modules.release(e)

	spec := &wasmcapi.Spec{
		Argv:         w.Argv,
		Env:          w.Env,
		Stdin:        w.Stdin,
		Fuel:         lim.Fuel,
		Memory:       lim.Memory,
		Wall:         lim.Wall,
		Output:       int(lim.Output),
		InheritStdio: o.inheritStdio,
		InheritEnv:   b.cfg.weak.inheritEnv,
	}
	if lim.CPU > 0 && lim.CPU < spec.Wall {
		spec.Wall = lim.CPU // a guest runs on one thread: CPU time ≤ wall time
	}
	if b.cfg.weak.noDeadline {
		spec.Wall = 0
	}
	if b.cfg.weak.ignoreOutputCap {
		spec.Output = sandbox.MaxOutputBytes
	}
	if b.cfg.weak.noMemoryLimit {
		spec.Memory = 0
	}
	// A fresh workspace is there whenever the module could see it: always
	// but for a module that cannot name a path (entry.namesPaths) and has
	// no files, which keeps the in-process path. The runner's workspace is
	// the sandbox's (o.workDir) or none; unprivileged, only files make one
	// (and CheckWorkload refused those).
	guest := w.GuestWorkdir()
	fresh := len(w.Files) > 0 || len(w.Collect) > 0 ||
		e.namesPaths && !o.inheritStdio && !b.cfg.Unprivileged
	var ws *workspace
	if fresh {
		if ws, err = newWorkspace(b.work, w.Files, lim.Disk, !b.cfg.weak.noDiskQuota); err != nil {
			return nil, err
		}
		defer func() {
			if err := ws.remove(); err != nil {
				b.cfg.Logger.Warn("wasm: workspace cleanup", "dir", ws.dir, "err", err)
			}
		}()
		host := ws.dir
		if b.cfg.weak.workspaceParent {
			host = filepath.Dir(ws.dir)
		}
		spec.Preopens = append(spec.Preopens, wasmcapi.Preopen{Host: host, Guest: guest, Write: true})
	}
	if o.workDir != "" {
		spec.Preopens = append(spec.Preopens, wasmcapi.Preopen{Host: o.workDir, Guest: guest, Write: true})
	}
	for _, p := range b.cfg.Preopens {
		spec.Preopens = append(spec.Preopens, wasmcapi.Preopen{Host: p.Host, Guest: p.Guest, Write: b.cfg.weak.rwPreopens})
	}
	if r := b.cfg.weak.extraRoot; r != "" {
		spec.Preopens = append(spec.Preopens, wasmcapi.Preopen{Host: "/", Guest: r, Write: false})
	}

	res := &sandbox.Result{ID: inv.ID, Backend: Name}
	res.Timings.Started = time.Now()
	var out *wasmcapi.Outcome
	if b.pool != nil && len(spec.Preopens) > 0 && !o.inheritStdio {
		// A directory grant lets the guest open host descriptors: run it in
		// a worker process whose RLIMIT_NOFILE bounds them (worker.go).
		out, err = b.pool.run(ctx, &workerJob{Module: module, Spec: *spec, NoFile: lim.NoFile})
		if err != nil {
			return nil, err
		}
	} else {
		b.begin()
		out = e.pre.Run(ctx, spec)
		b.end()
	}
	res.Timings.Finished = time.Now()
	if err := b.classify(out, spec, res); err != nil {
		return nil, err
	}
	if ws != nil && len(w.Collect) > 0 {
		files, skipped, err := ws.collect(w.Collect, sandbox.MaxFileBytes, b.cfg.weak.followSymlinks)
		if err != nil {
			return nil, err
		}
		res.Files = files
		if len(skipped) > 0 {
			b.cfg.Logger.Debug("wasm: collect skipped files", "id", inv.ID, "skipped", skipped)
		}
	}
	return res, nil
}

// oomMargin is how close to its memory limit a failed guest must have come
// to be classed oom. Wasmtime's C API does not report a refused memory.grow,
// so this is inferred: the largest single growth of common guests is the Go
// runtime's 4 MiB heap arena.
func oomMargin(limit int64) int64 { return max(4<<20+64<<10, limit/8) }

// classify maps an outcome to a Result, or to an error when the workload
// could not run at all.
func (b *Backend) classify(out *wasmcapi.Outcome, spec *wasmcapi.Spec, res *sandbox.Result) error {
	res.Stdout, res.Stderr = out.Stdout, out.Stderr
	res.StdoutTruncated, res.StderrTruncated = out.StdoutTruncated, out.StderrTruncated
	res.Usage = sandbox.Usage{Wall: out.Total, CPU: out.Run, PeakMemory: int64(out.MemorySize), Fuel: out.FuelUsed}
	nearLimit := spec.Memory > 0 && int64(out.MemorySize) >= spec.Memory-oomMargin(spec.Memory)
	switch out.End {
	case wasmcapi.EndExit:
		res.ExitCode = out.ExitCode
		if out.ExitCode != 0 && nearLimit {
			res.Class, res.Error = sandbox.OOM, sandbox.MemoryLimitMessage(spec.Memory)
		}
	case wasmcapi.EndTrap, wasmcapi.EndHostError:
		res.ExitCode, res.Signal, res.Error = -1, "trap", "host error: "+out.Message
		if out.End == wasmcapi.EndTrap {
			res.Error = wasmcapi.TrapName(out.TrapCode) + ": " + out.Message
		}
		switch {
		case out.End == wasmcapi.EndTrap && out.TrapCode == wasmcapi.TrapOutOfFuel:
			res.Class = sandbox.OutOfFuel
		case out.End == wasmcapi.EndTrap && out.TrapCode == wasmcapi.TrapInterrupt:
			res.Class = sandbox.Timeout
		case nearLimit:
			res.Class = sandbox.OOM
		}
	case wasmcapi.EndTimeout:
		res.ExitCode, res.Signal, res.Class = -1, "killed", sandbox.Timeout
		res.Error = sandbox.WallLimitMessage(spec.Wall)
	case wasmcapi.EndCancelled:
		res.ExitCode, res.Signal, res.Class = -1, "killed", sandbox.Killed
		res.Error = "cancelled"
	case wasmcapi.EndInstantiate:
		if strings.Contains(out.Message, "pool") || strings.Contains(out.Message, "concurrent") {
			return sandbox.Wrap(sandbox.BackendFailure, errors.New(out.Message), "wasm: instance pool")
		}
		// The module's declared minimum memory or table exceeds the limits.
		res.ExitCode, res.Class, res.Error = -1, sandbox.OOM, "instantiation refused: "+out.Message
	case wasmcapi.EndNoStart:
		return sandbox.Errorf(sandbox.BadInput, "workload.module", "the module exports no _start function (not a WASI command)")
	default:
		return sandbox.Wrap(sandbox.BackendFailure, errors.New(out.Message), "wasm: WASI setup")
	}
	return nil
}

// wat2wasm compiles WebAssembly text (for Probe and the battery's guests).
func wat2wasm(src string) ([]byte, error) { return wasmtime.Wat2Wasm(src) }
