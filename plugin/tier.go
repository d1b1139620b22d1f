package plugin

import (
	"time"

	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/sandbox"
)

// A large component's first load compiles it quickly — Cranelift without
// its optimizations, with its single-pass register allocator
// (wasmcapi.EngineConfig.QuickCompile): a 12 MB JavaScript component takes
// 5.3 s instead of 10.1 s on this machine's two cores — and serves calls
// from that code at once. Meanwhile the host compiles it fully in the
// background and seals that in Dir, so every later load gets the optimized
// code from the cache; then, as soon as the plugin is idle (no call in
// flight, no resource held for a tenant), it swaps the optimized code in,
// as an install of the same manifest would. The quick code is never
// sealed. The runner inside a sandbox (exec.go) makes one call and exits,
// so it does not compile a second time. An isolated plugin's first load
// compiles fully: its calls run in sandboxes from the code the host ships
// (isolated.go), and a large component's quick code is too large to ship.

// quickAbove is the component size from which a first load compiles
// quickly: a C component of a few KB compiles in milliseconds anyway.
const quickAbove = 4 << 20

// tierRetry is how often an optimized plugin waits for its quick one to be
// idle.
const tierRetry = 200 * time.Millisecond

// quickEngine is the engine that compiles quickly, made at its first use:
// the host's engine configuration with QuickCompile, and a pool of one
// slot, since it only compiles (its code runs on the host's engine).
func (h *Host) quickEngine() (*wasmcapi.Engine, error) {
	h.quickOnce.Do(func() {
		cfg := h.engine.Config()
		cfg.QuickCompile, cfg.PoolSlots, cfg.ComponentSlots = true, 1, 1
		h.quick, h.quickErr = wasmcapi.NewEngine(cfg)
	})
	return h.quick, h.quickErr
}

// compileQuick compiles wasm on the quick engine, for the host's engine.
func (h *Host) compileQuick(wasm []byte) (*wasmcapi.Component, error) {
	q, err := h.quickEngine()
	if err != nil {
		return nil, err
	}
	h.quickCompiles.Add(1)
	qc, err := q.CompileComponent(wasm)
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BadInput, err, "invalid component")
	}
	art, err := qc.Serialize()
	qc.Close()
	if err != nil {
		return nil, err
	}
	return h.engine.DeserializeComponent(art)
}

// tierUp compiles p's component fully in the background, seals it, and
// swaps it in for p when p is idle.
func (h *Host) tierUp(p *Plugin, wasm []byte) {
	h.mu.Lock()
	if h.closed { // Close waits for the compiles it knows of
		h.mu.Unlock()
		return
	}
	h.bg.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.bg.Done()
		started := time.Now()
		key, path := h.artifact(p.manifest.Component)
		comp, err := h.compileSealed(key, path, wasm)
		if err != nil {
			h.cfg.Log.Warn("plugin: optimized compile failed; the quick code stays", "plugin", p.manifest.Name, "err", err)
			return
		}
		var code *isolatedCode
		if p.isolated != nil {
			if code, err = shipped(comp, wasm); err != nil {
				comp.Close()
				h.cfg.Log.Warn("plugin: optimized code not shipped; the quick code stays", "plugin", p.manifest.Name, "err", err)
				return
			}
		}
		np, err := h.plugin(&p.manifest, p.limits, comp, code) // closes comp when it refuses
		if err != nil {
			h.cfg.Log.Warn("plugin: optimized code refused; the quick code stays", "plugin", p.manifest.Name, "err", err)
			return
		}
		if h.swap(p, np) {
			h.cfg.Log.Info("plugin: optimized code in", "plugin", p.manifest.Name, "took", time.Since(started))
		}
	}()
}

// swap installs np in place of old once old is idle: no call in flight
// (the host's is its only reference) and no resource held in it. It gives
// up, and closes np, when old is no longer installed (removed, or
// installed again: that install has its own tier-up) or the host closes.
func (h *Host) swap(old, np *Plugin) bool {
	for {
		h.mu.Lock()
		if h.closed || h.plugins[old.manifest.Name] != old {
			h.mu.Unlock()
			np.comp.Close()
			return false
		}
		old.mu.Lock()
		idle := old.refs == 1 && len(old.pinned) == 0
		old.mu.Unlock()
		if idle { // acquire needs h.mu: no call can start on old meanwhile
			h.plugins[old.manifest.Name] = np
			np.refs = 1
			h.mu.Unlock()
			old.release()
			return true
		}
		h.mu.Unlock()
		select {
		case <-h.closing:
			np.comp.Close()
			return false
		case <-time.After(tierRetry):
		}
	}
}
