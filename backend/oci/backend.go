package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/idmap"
	"github.com/wovyr/wovyr/sandbox"
)

// Backend is the container or the gvisor backend. Both share every line of
// code but the runtime driver and a few runsc-specific flags.
type Backend struct {
	cfg      Config
	name     string
	strength sandbox.Strength
	gvisor   bool
	agent    string // our read-only copy of wovyr-guest
	runner   string // our read-only copy of the static wasm runner, or ""
	run      string // runDir(cfg.StateDir)

	// weak is set only on copies made by Weakened (positive controls).
	weak battery.Weakness

	mu     sync.Mutex
	driver *driver // chosen by the first successful probe

	nsMu    sync.Mutex
	nsCache map[idmap.Range]*os.File // see userns

	goldMu  sync.Mutex
	goldens map[string]*golden // by key ID (snapshot.go)

	cloneBat cloneState // the snapshot rows' run (battery_clones.go)

	placer *cpuPlacer     // pooled gVisor only: each sandbox's CPU (cpus.go)
	ceil   rlimitCeilings // the agent's hard rlimits: what a claim may raise to (spec.go)
}

// NewContainer returns the container backend: crun, runc as fallback, or
// the runtime Config.Runtime names.
func NewContainer(cfg Config) (*Backend, error) {
	return newBackend(cfg, "container", sandbox.Container, false)
}

// NewGVisor returns the gvisor backend: runsc.
func NewGVisor(cfg Config) (*Backend, error) {
	return newBackend(cfg, "gvisor", sandbox.GVisor, true)
}

func newBackend(cfg Config, name string, s sandbox.Strength, gvisor bool) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Runtime, err = cfg.checkRuntime(gvisor); err != nil {
		return nil, err
	}
	b := &Backend{cfg: cfg, name: name, strength: s, gvisor: gvisor, run: runDir(cfg.StateDir), ceil: agentCeilings(!gvisor)}
	if gvisor && cfg.Pooled {
		if b.placer, err = newCPUPlacer(); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{cfg.StateDir, filepath.Join(cfg.StateDir, "run"), b.run, filepath.Join(b.run, "sb"), filepath.Join(b.run, "bin")} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, fmt.Errorf("oci: state dir: %w", err)
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return nil, fmt.Errorf("oci: state dir: %w", err)
		}
	}
	if err := searchable(cfg.StateDir); err != nil {
		return nil, err
	}
	if b.agent, err = installBinary(cfg.Agent, filepath.Join(b.run, "bin"), "wovyr-guest"); err != nil {
		return nil, fmt.Errorf("oci: agent binary (build cmd/wovyr-guest with CGO_ENABLED=0): %w", err)
	}
	if cfg.WasmRunner != "" {
		if b.runner, err = installBinary(cfg.WasmRunner, filepath.Join(b.run, "bin"), "wovyr-wasm"); err != nil {
			return nil, fmt.Errorf("oci: wasm runner (a static build of cmd/wovyr): %w", err)
		}
	}
	return b, nil
}

// searchable checks that every ancestor of dir lets others search it: the
// runtimes resolve the bundle as the sandbox's unprivileged root.
func searchable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("oci: state dir: %w", err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("oci: %s is not searchable by others (mode %v); sandboxes could not reach their bundle", d, fi.Mode().Perm())
		}
		if d == "/" {
			return nil
		}
	}
}

// Name implements sandbox.Backend.
func (b *Backend) Name() string { return b.name }

// Strength implements sandbox.Backend.
func (b *Backend) Strength() sandbox.Strength { return b.strength }

// Kinds implements sandbox.Backend: wasm modules run through the static
// wasm runner (Config.WasmRunner) inside the sandbox, when there is one;
// every sandbox can hold a session (session.go).
func (b *Backend) Kinds() []sandbox.WorkloadKind {
	if b.runner != "" {
		return []sandbox.WorkloadKind{sandbox.KindCommand, sandbox.KindWasm, sandbox.KindSession}
	}
	return []sandbox.WorkloadKind{sandbox.KindCommand, sandbox.KindSession}
}

// imagesDir is where templates live.
func (b *Backend) imagesDir() string { return filepath.Join(b.cfg.StateDir, "images") }

// configHash digests what decides this backend's isolation: the runtime, its
// flags and a spec generated for a fixed shape.
func (b *Backend) configHash(d *driver) string {
	// The rlimit ceilings uncapped: wovyr's own hard limits, which cap
	// them under runc/crun, are the host's, not the configuration's.
	s, err := buildSpec(specParams{rootfs: "/", agent: agentPath, cgroups: "/wovyr/_pool/x",
		ids: idmap.Range{HostUID: 1, HostGID: 1, Size: rangeSize}, limits: sandbox.Limits{}.WithDefaults(), gvisor: b.gvisor,
		ceil: agentCeilings(false)})
	b.hashNetwork(s)
	h := sha256.New()
	fmt.Fprintln(h, d.name, d.version, d.flags, d.hybrid, err, "weak="+string(b.weak), "wasm-runner="+filepath.Base(b.runner))
	if s != nil {
		s.Linux.UIDMappings, s.Linux.GIDMappings = nil, nil
		_ = json.NewEncoder(h).Encode(s)
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// chosen returns the driver the probe picked, probing if needed.
func (b *Backend) chosen(ctx context.Context) (*driver, error) {
	b.mu.Lock()
	d := b.driver
	b.mu.Unlock()
	if d != nil {
		return d, nil
	}
	if c := b.Probe(ctx); !c.Available {
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "%s backend unavailable: %s", b.name, c.Reason)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.driver, nil
}

// rangeFor returns the first uid range (benchmarks' raw bundles).
func (b *Backend) rangeFor() idmap.Range {
	return idmap.Range{HostUID: b.cfg.UIDBase, HostGID: b.cfg.UIDBase, Size: rangeSize}
}
