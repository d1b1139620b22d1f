package wasm

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/sandbox"
)

// Weaknesses of the wasm backend for the battery's positive controls, beside
// battery.NoMemoryLimit, NoDiskQuota, NoDeadline, NoOutputCap and InheritEnv.
const (
	WeakHostRoot        battery.Weakness = "host-root-preopen" // the host's "/" is preopened
	WeakFollowLinks     battery.Weakness = "follow-symlinks"   // the host collects through links
	WeakRWPreopens      battery.Weakness = "rw-preopens"       // read-only grants become read-write
	WeakSharedWorkspace battery.Weakness = "shared-workspace"  // /workspace is the parent of all workspaces
	WeakWidePreopen     battery.Weakness = "wide-preopen"      // a grant one directory too wide
	WeakBigStack        battery.Weakness = "big-wasm-stack"    // wasm stack above the certified budget
	WeakNoModuleBound   battery.Weakness = "no-module-bound"   // no module size bound
	WeakNoFDBound       battery.Weakness = "no-fd-bound"       // directory grants run in-process, unbounded
	WeakTenantInit      battery.Weakness = "tenant-preinit"    // init runs with the first invocation's env
	// WeakProbeSelf marks probes with no configuration knob to weaken
	// (69): the probe weakens its own attempt instead.
	WeakProbeSelf battery.Weakness = "probe-self-control"
)

var weaknesses = map[battery.Weakness]func(*Config){
	WeakHostRoot:          func(c *Config) { c.weak.extraRoot = "/host" },
	WeakFollowLinks:       func(c *Config) { c.weak.followSymlinks = true },
	WeakRWPreopens:        func(c *Config) { c.weak.rwPreopens = true },
	WeakSharedWorkspace:   func(c *Config) { c.weak.workspaceParent = true },
	WeakWidePreopen:       func(c *Config) { c.weak.widePreopen = true },
	WeakBigStack:          func(c *Config) { c.Engine.MaxWasmStack = 4 * certifiedStack },
	WeakNoModuleBound:     func(c *Config) { c.MaxModuleBytes = 1 << 30 },
	WeakNoFDBound:         func(c *Config) { c.weak.noFDBound = true },
	WeakTenantInit:        func(c *Config) { c.weak.tenantInit = true },
	WeakProbeSelf:         func(c *Config) { c.weak.probeSelf = true },
	battery.NoMemoryLimit: func(c *Config) { c.weak.noMemoryLimit = true },
	battery.NoDiskQuota:   func(c *Config) { c.weak.noDiskQuota = true },
	battery.NoDeadline:    func(c *Config) { c.weak.noDeadline = true },
	battery.NoOutputCap:   func(c *Config) { c.weak.ignoreOutputCap = true },
	battery.InheritEnv:    func(c *Config) { c.weak.inheritEnv = true },
}

// weaken returns cfg with weakness w applied (and named, so ConfigHash
// changes and a weakened backend can never carry a certification).
func weaken(cfg Config, w battery.Weakness) Config {
	cfg.Preopens = slices.Clone(cfg.Preopens)
	if f, ok := weaknesses[w]; ok {
		f(&cfg)
	}
	cfg.weak.name = w
	return cfg
}

// children are weakened copies, closed with their parent.
type children struct {
	mu   sync.Mutex
	list []*Backend
}

// Weakened implements battery.Weakener: a new Backend with one weakness, for
// positive controls only. It is closed when b is closed.
func (b *Backend) Weakened(w battery.Weakness) (sandbox.Backend, error) {
	if _, ok := weaknesses[w]; !ok {
		return nil, fmt.Errorf("wasm: no %q configuration", w)
	}
	nb, err := New(weaken(b.cfg, w))
	if err != nil {
		return nil, err
	}
	b.kids.mu.Lock()
	b.kids.list = append(b.kids.list, nb)
	b.kids.mu.Unlock()
	return nb, nil
}

// Suite is the battery suite that certifies b (`wovyr certify --backend
// wasm`): the W probes, each run on the target's configuration, and why the
// remaining rows that name wasm do not apply (unprivileged, also the rows
// that need a writable workspace).
func Suite(b *Backend) battery.Suite {
	s := battery.Suite{Target: battery.Target{Backend: b}, NotApplicable: notApplicable()}
	if b.cfg.Unprivileged {
		maps.Copy(s.NotApplicable, unprivilegedNA())
	}
	for _, p := range Probes() {
		s.Probes = append(s.Probes, battery.Probe{
			ID: p.ID, Weakness: p.weakness, Backends: []string{Name},
			Run: func(ctx context.Context, t battery.Target) battery.Observation {
				wb, ok := t.Backend.(*Backend)
				if !ok {
					return battery.Observation{Observed: fmt.Sprintf("target is %T, not the wasm backend", t.Backend)}
				}
				r := p.runCfg(ctx, wb.cfg)
				return battery.Observation{Tried: r.Tried, Observed: r.Observed, Secure: r.Pass}
			},
		})
	}
	return s
}

func notApplicable() map[int]string {
	const noSockets = "no sockets: the guest has no socket API beyond sock_* on preopened sockets, none is ever preopened (probe 66 checks every fd), and any non-empty allowlist is refused as policy-unenforceable"
	const rng = "random_get and the clocks reach the host's on every call (Wasmtime's WASI): an instance has no kernel, runtime or RNG state of its own to carry; what a module's init drew is in its pre-initialised artifact and shared by every instance by design (ADR 0019), which no configuration can change, so no control could flag"
	const baseline = "an instance has no process, and its descriptor table is built per invocation from its grants alone (probe 66 checks every fd); a pre-initialised artifact holds memory and globals, nothing else"
	const creds = "no credential enters a wasm instance: no socket is preopened and allowlists are refused, and a module's init runs with no env, args, stdin or directory (row 85 checks that an artifact holds nothing of a tenant's)"
	m := map[int]string{
		15: "no race window: the host reads the workspace (Collect) only after the guest has ended, never while it runs; link-following at collect is probe 14",
		47: noSockets, 59: noSockets, 84: noSockets,
		87: rng, 90: baseline, 91: creds,
	}
	for id := 70; id <= 81; id++ {
		m[id] = noSockets
	}
	return m
}
