package plugin

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/internal/artifact"
	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/sandbox"
)

// Config configures a Host. The zero value is usable: every zero field is
// documented.
type Config struct {
	// Dir holds compiled components (sealed artifacts, see package
	// internal/artifact), so a restart loads them in milliseconds instead of
	// compiling. Empty means no disk cache.
	Dir string
	// Trust is the operator's signing keys. Nil trusts no key: only
	// unsigned untrusted (or hostile) plugins can load, and only where
	// their floor allows.
	Trust *TrustStore
	// Floors are the trust floors; the zero value is the defaults. The
	// host runs components in-process at wasm strength, so a plugin whose
	// class's floor is above wasm (untrusted, hostile by default) is
	// refused with floor-unmet.
	Floors sandbox.Floors
	// Limits are every call's defaults and caps (a manifest may only lower
	// them). Zero fields take Limits' documented defaults.
	Limits Limits
	// Slots is how many component instances may be live at once (the
	// instance pool). Zero means 64.
	Slots uint32
	// MaxIdle is how many idle instances are kept per plugin and tenant
	// for the next call. Zero means 2.
	MaxIdle int
	// EpochTick is how often deadlines and cancellation are checked. Zero
	// means 1ms.
	EpochTick time.Duration
	// Log receives warnings (a discarded artifact) and plugins' own
	// wovyr:host/log entries. Nil discards them.
	Log *slog.Logger
	// KV holds plugins' wovyr:host/kv data (a *store.Store). Nil means
	// the capability is not offered: a component importing it is refused
	// at load.
	KV KVStore
	// KVQuota caps the bytes (keys plus values) each tenant keeps in each
	// plugin's store. Zero means 1 MiB.
	KVQuota int64
	// Egress is the node's egress service, through which wovyr:host/http
	// requests go under each call's network policy. Nil means the
	// capability is not offered.
	Egress *egress.Service
	// FetchRoots are the PEM certificates that verify the servers
	// wovyr:host/http reaches over https, in-process and in the runner
	// (which gets them as a file). Nil means the system's roots (the
	// sandbox image's, for the runner).
	FetchRoots []byte
	// FetchMaxBody caps a wovyr:host/http body each way. Zero means 1 MiB.
	FetchMaxBody int64
	// Isolated runs the calls of plugins whose trust class's floor is
	// above wasm, each in a fresh sandbox at that floor, through the
	// runner IsolatedArgv names inside it (isolated.go). Nil refuses such
	// plugins at load with floor-unmet.
	Isolated Runner
	// IsolatedArgv is the runner's command inside those sandboxes, e.g.
	// {"/.wovyr/wasm-exec", "component-exec"} (package oci's RunnerPath).
	IsolatedArgv []string

	// weak is the battery's positive controls' one weakened property
	// (battery.go); never set outside them.
	weak weakness
	// oneShot is the runner's host (exec.go), which makes one call and
	// exits: a quickly compiled component is not compiled again.
	oneShot bool
	// engineMemory, when not zero, is the engine's largest linear memory
	// instead of Limits.Memory: the runner's, to load what a host with
	// that engine compiled (exec.go).
	engineMemory uint64
	// sandboxNet is the runner's wovyr:host/http (exec.go): its sandbox
	// sits in the call's egress slot, and requests go to the slot's
	// explicit proxy.
	sandboxNet *sandboxNet
}

// Host loads component plugins and calls their functions in-process. It is
// safe for concurrent use.
type Host struct {
	cfg    Config
	engine *wasmcapi.Engine
	bare   *wasmcapi.Linker // links nothing: for components without imports
	wasi   *wasmcapi.Linker // links WASI 0.2 and wovyr:host; imports are gated at load

	ticker *wasmcapi.EpochTicker // one for every call of the engine
	// quickCompiles and fullCompiles count components compiled rather
	// than loaded from Dir, quickly and fully (tier.go).
	quickCompiles, fullCompiles atomic.Int64
	// idPrefix and calls make invocation ids ("pc-1f2e3d4c-1a").
	idPrefix string
	calls    atomic.Uint64

	// The quick engine and the background compiles of tier-up (tier.go).
	quickOnce sync.Once
	quick     *wasmcapi.Engine
	quickErr  error
	bg        sync.WaitGroup
	closing   chan struct{}

	mu        sync.Mutex
	plugins   map[string]*Plugin
	idleSlots []*egress.Slot // wiped egress slots for the next call that fetches
	roots     *x509.CertPool // FetchRoots, parsed
	closed    bool
}

// NewHost makes a host with its own engine and instance pool.
func NewHost(cfg Config) (*Host, error) {
	cfg.Limits = cfg.Limits.withDefaults()
	if cfg.Slots == 0 {
		cfg.Slots = 64
	}
	if cfg.MaxIdle == 0 {
		cfg.MaxIdle = 2
	}
	if cfg.EpochTick == 0 {
		cfg.EpochTick = time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Dir != "" {
		if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("plugin: %w", err)
		}
		// What a crash left half written: this host is Dir's only writer.
		if n, err := artifact.RemoveStale(cfg.Dir); n > 0 || err != nil {
			cfg.Log.Info("plugin: removed unfinished compiled components", "dir", cfg.Dir, "removed", n, "err", err)
		}
	}
	// A component's core instances and memories come out of the same pool,
	// so those get several slots per component instance.
	maxMemory := uint64(max(cfg.Limits.Memory, 64<<10))
	if cfg.engineMemory != 0 {
		maxMemory = cfg.engineMemory
	}
	if cfg.weak == weakNoMemoryLimit {
		maxMemory = 1 << 30
	}
	e, err := wasmcapi.NewEngine(wasmcapi.EngineConfig{
		PoolSlots: 4 * cfg.Slots, ComponentSlots: cfg.Slots, MaxMemory: maxMemory,
	})
	if err != nil {
		return nil, fmt.Errorf("plugin: %w", err)
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	h := &Host{cfg: cfg, engine: e, plugins: map[string]*Plugin{}, idPrefix: "pc-" + hex.EncodeToString(id[:]) + "-",
		closing: make(chan struct{})}
	if cfg.FetchRoots != nil {
		if h.roots = x509.NewCertPool(); !h.roots.AppendCertsFromPEM(cfg.FetchRoots) {
			h.closeEngine()
			return nil, errors.New("plugin: FetchRoots holds no PEM certificate")
		}
	}
	if h.bare, err = e.NewLinker(false); err == nil {
		h.wasi, err = e.NewLinker(true)
	}
	if err == nil {
		err = h.defineHostCaps(h.wasi)
	}
	if err != nil {
		h.closeEngine()
		return nil, fmt.Errorf("plugin: linker: %w", err)
	}
	h.ticker = e.StartEpochTicker(h.cfg.EpochTick)
	return h, nil
}

func (h *Host) begin() { h.ticker.Begin() }

func (h *Host) end() { h.ticker.End() }

// Load checks m against wasm and installs the plugin under m.Name,
// replacing one of that name (calls in flight finish on the old one).
// Everything that can be refused is refused here, before anything runs:
// a wrong digest, a signature the trust class needs, a floor above wasm,
// limits above the host's, an invalid component, an import the manifest
// does not grant (named), and a component that does not instantiate.
func (h *Host) Load(m *Manifest, wasm []byte) (*Info, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if d := Digest(wasm); d != m.Component {
		return nil, sandbox.Errorf(sandbox.BadInput, "manifest.component", "the component's digest is %s, but the manifest names %s", d, m.Component)
	}
	if err := h.cfg.Trust.Check(m); err != nil && h.cfg.weak != weakNoSignatureCheck {
		return nil, err
	}
	isolated := h.cfg.Floors.Of(m.Trust) > sandbox.Wasm
	if f := h.cfg.Floors.Of(m.Trust); isolated && h.cfg.Isolated == nil {
		return nil, sandbox.Errorf(sandbox.FloorUnmet, "manifest.trust",
			"%s plugins need %s strength or above; this node hosts plugins in-process at wasm strength", m.Trust, f)
	}
	lim, err := m.Limits.within(h.cfg.Limits)
	if err != nil {
		return nil, err
	}
	// An isolated plugin's quick code would not serve calls at once: a
	// large component's is too large to ship (104 MB for a 12 MB
	// JavaScript one, against 60 MB optimized), so each call would compile
	// in its sandbox (12 s in gVisor) until the tier-up.
	comp, quick, err := h.compile(m.Component, wasm, !isolated)
	if err != nil {
		return nil, err
	}
	var code *isolatedCode
	if isolated {
		if code, err = shipped(comp, wasm); err != nil {
			comp.Close()
			return nil, err
		}
	}
	p, err := h.plugin(m, lim, comp, code)
	if err != nil {
		return nil, err
	}
	p.quick = quick
	info, err := h.install(p)
	if err == nil && quick && !h.cfg.oneShot {
		h.tierUp(p, wasm)
	}
	return info, err
}

// plugin checks comp's imports against m's grants and what this host
// offers, and makes the plugin, run out of process from code when that is
// not nil; it closes comp when it refuses.
func (h *Host) plugin(m *Manifest, lim Limits, comp *wasmcapi.Component, code *isolatedCode) (*Plugin, error) {
	isolated := code != nil
	if err := checkImports(comp.Imports(), m.capabilities()); err != nil && h.cfg.weak != weakNoImportCheck {
		comp.Close()
		return nil, err
	}
	if err := h.checkHostCaps(comp.Imports()); err != nil {
		comp.Close()
		return nil, err
	}
	p := &Plugin{host: h, manifest: *m, limits: lim, comp: comp, linker: h.bare, idle: map[string][]*wasmcapi.Instance{},
		pinned: map[string][]*pinned{}, drops: dropFuncs(comp)}
	p.manifest.Capabilities = m.capabilities()
	if len(comp.Imports()) > 0 {
		p.linker = h.wasi
	}
	if isolated {
		p.isolated = code // instantiating runs the component's start: never here
		return p, nil
	}
	in, err := p.linker.Instantiate(comp, wasmcapi.Limits{Memory: lim.Memory})
	if err != nil {
		comp.Close()
		return nil, sandbox.Wrap(sandbox.BadInput, err, "the component does not instantiate")
	}
	in.Close()
	return p, nil
}

// loadCompiled installs, under m, the compiled component in the file at
// path, which a host with this host's engine settings serialized. Only the
// plugin runner calls it (exec.go): Wasmtime trusts what it deserializes
// as machine code, so the file must come from the host that started the
// runner, never from a tenant.
func (h *Host) loadCompiled(m *Manifest, path string) (*Info, error) {
	lim, err := m.Limits.within(h.cfg.Limits)
	if err != nil {
		return nil, err
	}
	comp, err := h.engine.DeserializeComponentFile(path)
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BadInput, err, "the compiled component does not load")
	}
	p, err := h.plugin(m, lim, comp, nil)
	if err != nil {
		return nil, err
	}
	return h.install(p)
}

// install puts p under its name, replacing the plugin of that name.
func (h *Host) install(p *Plugin) (*Info, error) {
	m, comp := &p.manifest, p.comp
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		comp.Close()
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "the plugin host is closed")
	}
	old := h.plugins[m.Name]
	h.plugins[m.Name] = p
	p.refs = 1 // the host's own reference
	h.mu.Unlock()
	if old != nil {
		old.release()
	}
	return p.info(), nil
}

// compile loads the component's sealed artifact from Dir, or compiles it:
// quickly (tier.go) for a large component where quickOK, which then says
// quick, and otherwise fully, sealing the result in Dir.
func (h *Host) compile(digest string, wasm []byte, quickOK bool) (c *wasmcapi.Component, quick bool, err error) {
	key, path := h.artifact(digest)
	if path != "" {
		c, err := h.loadSealed(path, key)
		if err == nil {
			return c, false, nil
		}
		if errors.Is(err, errRefused) {
			h.cfg.Log.Warn("plugin: wasmtime refused a sealed component; recompiling", "path", path, "err", err)
		} else if !errors.Is(err, fs.ErrNotExist) {
			h.cfg.Log.Warn("plugin: discarding compiled component", "path", path, "err", err)
		}
		_ = os.Remove(path)
	}
	if quickOK && len(wasm) >= quickAbove {
		if c, err = h.compileQuick(wasm); err == nil || sandbox.ClassOf(err) == sandbox.BadInput {
			return c, err == nil, err
		}
		h.cfg.Log.Warn("plugin: quick compile failed; compiling fully", "err", err)
	}
	c, err = h.compileSealed(key, path, wasm)
	return c, false, err
}

// artifact is the sealed-cache key of the component with digest and its
// file in Dir ("" without one).
func (h *Host) artifact(digest string) (key, path string) {
	key = digest + "|" + h.engine.Config().CodeHash() + "|component|wasmtime-" + wasmcapi.Version
	if h.cfg.Dir != "" {
		path = filepath.Join(h.cfg.Dir, artifactName(key))
	}
	return key, path
}

// compileSealed compiles wasm fully and seals the result at path (if any).
func (h *Host) compileSealed(key, path string, wasm []byte) (*wasmcapi.Component, error) {
	h.fullCompiles.Add(1)
	c, err := h.engine.CompileComponent(wasm)
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BadInput, err, "invalid component")
	}
	if path != "" {
		if b, err := c.Serialize(); err != nil || artifact.Write(path, key, b) != nil {
			h.cfg.Log.Warn("plugin: cannot store compiled component", "path", path, "err", err)
		}
	}
	return c, nil
}

// mapAbove is the artifact size from which a sealed component is mapped
// from a sealed memfd rather than read into memory and copied by Wasmtime:
// a JavaScript component's is 60 MB (two copies of it were 2/3 of its
// load), a C one's a few KB (where a memfd costs more than it saves).
const mapAbove = 4 << 20

// errRefused marks a sealed artifact that was intact but that Wasmtime
// would not load.
var errRefused = errors.New("refused by wasmtime")

// loadSealed loads the sealed artifact at path, verified for key.
func (h *Host) loadSealed(path, key string) (*wasmcapi.Component, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	var c *wasmcapi.Component
	if fi.Size() < mapAbove {
		b, rerr := artifact.Read(path, key)
		if rerr != nil {
			return nil, rerr
		}
		c, err = h.engine.DeserializeComponent(b)
	} else {
		f, oerr := artifact.OpenSealed(path, key)
		if oerr != nil {
			return nil, oerr
		}
		c, err = h.engine.DeserializeComponentFile(artifact.MemfdPath(f))
		f.Close() // Wasmtime's mapping keeps the sealed pages
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errRefused, err)
	}
	return c, nil
}

// Remove uninstalls the plugin name; calls in flight finish first.
func (h *Host) Remove(name string) error {
	h.mu.Lock()
	p := h.plugins[name]
	delete(h.plugins, name)
	h.mu.Unlock()
	if p == nil {
		return sandbox.Errorf(sandbox.NotFound, "", "no plugin %q", name)
	}
	p.release()
	return nil
}

// List describes every installed plugin, by name.
func (h *Host) List() []Info {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Info, 0, len(h.plugins))
	for _, p := range h.plugins {
		out = append(out, *p.info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// acquire returns the plugin name with a reference the caller releases.
func (h *Host) acquire(name string) (*Plugin, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.plugins[name]
	if p == nil {
		return nil, sandbox.Errorf(sandbox.NotFound, "", "no plugin %q", name)
	}
	p.mu.Lock()
	p.refs++
	p.mu.Unlock()
	return p, nil
}

// Close uninstalls every plugin and frees the engine. Calls must have
// ended. It is idempotent.
func (h *Host) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	close(h.closing)
	h.mu.Unlock()
	h.bg.Wait() // a background compile ends before the engine does
	h.mu.Lock()
	ps, slots := h.plugins, h.idleSlots
	h.plugins, h.idleSlots = nil, nil
	h.mu.Unlock()
	for _, p := range ps {
		p.release()
	}
	for _, s := range slots {
		if err := s.Close(context.Background()); err != nil {
			h.cfg.Log.Warn("plugin: egress slot close", "err", err)
		}
	}
	h.ticker.Stop()
	h.closeEngine()
}

func (h *Host) closeEngine() {
	if h.bare != nil {
		h.bare.Close()
	}
	if h.wasi != nil {
		h.wasi.Close()
	}
	if h.quick != nil {
		h.quick.Close()
	}
	h.engine.Close()
}

func artifactName(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:16]) + ".cwasm"
}
