package wasm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"github.com/wovyr/wovyr/battery"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// Record is one battery probe's result (BATTERY.md numbering).
type Record struct {
	ID      int    `json:"id"`
	Name    string `json:"name"`
	Backend string `json:"backend"`
	// Control is true for the positive control: the probe run against a
	// deliberately weakened configuration, where Pass must be false.
	Control  bool   `json:"control"`
	Tried    string `json:"tried"`
	Observed string `json:"observed"`
	Pass     bool   `json:"pass"`
}

// Probe is one W probe of the battery with its positive control.
type Probe struct {
	ID   int
	Name string
	// weakness is the positive control's configuration (see weaknesses).
	weakness battery.Weakness
	run      func(ctx context.Context, e *probeEnv) (tried, observed string, pass bool)
}

// Probes lists the W probes: 6, 14, 44, 48, 51–55, 57, 58, 61–69, 85 and 86.
func Probes() []Probe {
	return []Probe{
		probeRiskyConfig, probeLinksCollect, probeInfoLeaks, probeSharedStorage,
		probeMemory, probeDisk, probeInodes, probeFDs, probeSpin, probeThreadsStacks, probeOutputFlood,
		probeTraversal, probeSymlinks, probeSwapRace, probeRights, probeFDTricks,
		probeAmbient, probeStackOverflow, probeCompileBomb, probeHostCalls,
		probePreinitResidue, probePreinitArtifacts,
	}
}

// RunProbes runs every probe and its positive control against cfg. The
// battery trusts a probe only if Pass is true and its control's Pass false.
func RunProbes(ctx context.Context, cfg Config) []Record {
	var out []Record
	for _, p := range Probes() {
		if _, na := unprivilegedNA()[p.ID]; na && cfg.Unprivileged {
			continue
		}
		out = append(out, p.Run(ctx, cfg), p.Control(ctx, cfg))
	}
	return out
}

// Run runs the probe against cfg, the configuration being certified.
func (p Probe) Run(ctx context.Context, cfg Config) Record { return p.exec(ctx, cfg, false) }

// Control runs the probe against a deliberately weakened copy of cfg; a
// sound probe reports Pass false.
func (p Probe) Control(ctx context.Context, cfg Config) Record { return p.exec(ctx, cfg, true) }

func (p Probe) exec(ctx context.Context, cfg Config, control bool) Record {
	cfg.weak = weakness{}
	if control {
		cfg = weaken(cfg, p.weakness)
	}
	return p.runCfg(ctx, cfg)
}

// runCfg runs the probe on cfg as given (weakened or not).
func (p Probe) runCfg(ctx context.Context, cfg Config) (r Record) {
	r = Record{ID: p.ID, Name: p.Name, Backend: Name, Control: cfg.weak.name != ""}
	e := &probeEnv{cfg: cfg, control: cfg.weak.probeSelf}
	defer e.close()
	defer func() {
		if v := recover(); v != nil { // a probe that crashes fails
			r.Observed, r.Pass = fmt.Sprintf("probe panicked: %v", v), false
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	r.Tried, r.Observed, r.Pass = p.run(ctx, e)
	return r
}

// probeEnv is one probe run: a scratch dir, a canary and a Backend.
type probeEnv struct {
	cfg     Config
	control bool
	b       *Backend
	scratch string
	canary  string // the secret every escape probe looks for
	cleanup []func()
}

func (e *probeEnv) close() {
	for i := len(e.cleanup) - 1; i >= 0; i-- {
		e.cleanup[i]()
	}
}

// backend makes the Backend under test (once), with extra read-only
// preopens; the scratch dir and a canary beside the workspaces exist then.
func (e *probeEnv) backend(pre ...Preopen) (*Backend, error) {
	if e.b != nil {
		return e.b, nil
	}
	e.cfg.Preopens = append(append([]Preopen(nil), e.cfg.Preopens...), pre...)
	b, err := New(e.cfg)
	if err != nil {
		return nil, err
	}
	e.b = b
	e.cleanup = append(e.cleanup, func() { b.Close() })
	var rnd [8]byte
	rand.Read(rnd[:])
	e.canary = "WOVYR-CANARY-" + hex.EncodeToString(rnd[:])
	return b, nil
}

// scratchDir is a host directory for the probe, removed afterwards.
func (e *probeEnv) scratchDir() string {
	if e.scratch == "" {
		d, err := os.MkdirTemp(filepath.Join(e.cfg.StateDir, "wasm"), "wovyr-probe-")
		if err != nil {
			panic(err)
		}
		e.scratch = d
		e.cleanup = append(e.cleanup, func() { os.RemoveAll(d) })
	}
	return e.scratch
}

// plant writes the canary to path and removes it at the end.
func (e *probeEnv) plant(path string) {
	if err := os.WriteFile(path, []byte(e.canary), 0o644); err != nil {
		panic(err)
	}
	e.cleanup = append(e.cleanup, func() { os.Remove(path) })
}

// runWat compiles a probe guest and runs it as one invocation.
func (e *probeEnv) runWat(ctx context.Context, src string, in *sandbox.Invocation) (*sandbox.Result, error) {
	mod, err := wat2wasm(src)
	if err != nil {
		return nil, fmt.Errorf("probe guest does not compile: %w", err)
	}
	return e.runModule(ctx, mod, in)
}

func (e *probeEnv) runModule(ctx context.Context, mod []byte, in *sandbox.Invocation) (*sandbox.Result, error) {
	if in == nil {
		in = &sandbox.Invocation{}
	}
	in.Tenant = "wovyr-battery"
	in.Policy.Trust = sandbox.Internal
	in.Workload.Kind, in.Workload.Module = sandbox.KindWasm, mod
	if len(in.Workload.Argv) == 0 {
		in.Workload.Argv = []string{"probe"}
	}
	if in.Limits.Wall == 0 {
		in.Limits.Wall = 20 * time.Second
	}
	sb, err := e.b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindWasm})
	if err != nil {
		return nil, err
	}
	defer sb.Destroy(context.WithoutCancel(ctx))
	return sb.Run(ctx, in)
}

// standInGuest is where an unprivileged probe's stand-in workspace is.
const standInGuest = "/probe-ro"

// workBackend is backend for the probes that work through a directory at
// fd 3 (traversal, descriptors, host calls). With root that is the
// invocation's workspace (work gives it a file). Unprivileged there is
// none, so fd 3 is a read-only stand-in holding probe.txt, made where
// workspaces live so that ".." from it reaches what it would from one.
func (e *probeEnv) workBackend(pre ...Preopen) (*Backend, error) {
	if !e.cfg.Unprivileged || e.b != nil {
		return e.backend(pre...)
	}
	parent := filepath.Join(e.cfg.StateDir, "wasm", "work")
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, err
	}
	d, err := os.MkdirTemp(parent, "wovyr-wasm-")
	if err != nil {
		return nil, err
	}
	e.cleanup = append(e.cleanup, func() { os.RemoveAll(d) })
	if err := os.WriteFile(filepath.Join(d, "probe.txt"), []byte("probe"), 0o644); err != nil {
		return nil, err
	}
	return e.backend(append([]Preopen{{Host: d, Guest: standInGuest}}, pre...)...)
}

// work is withWork for workBackend's probes: unprivileged, the stand-in
// is already granted and the invocation carries no files.
func (e *probeEnv) work(in *sandbox.Invocation) *sandbox.Invocation {
	if !e.cfg.Unprivileged {
		return withWork(in)
	}
	if in == nil {
		in = &sandbox.Invocation{}
	}
	return in
}

// workGuest is the guest path of workBackend's fd 3.
func (e *probeEnv) workGuest() string {
	if e.cfg.Unprivileged {
		return standInGuest
	}
	return workspaceGuest
}

// grantFD is the descriptor of the first of Config.Preopens for a guest
// that can name a path: 4, after its own workspace at 3, with root; 3
// unprivileged, where there is no workspace.
func (e *probeEnv) grantFD() int {
	if e.cfg.Unprivileged {
		return 3
	}
	return 4
}

// withWork makes the invocation preopen /workspace (fd 3) by giving it a file.
func withWork(in *sandbox.Invocation) *sandbox.Invocation {
	if in == nil {
		in = &sandbox.Invocation{}
	}
	in.Workload.Files = append(in.Workload.Files, sandbox.File{Path: "probe.txt", Data: []byte("probe")})
	return in
}

// guestLines parses "label=value" lines; read lines are kept whole.
func guestLines(out []byte) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.Contains(k, " read:") {
			m[k] = v
		}
	}
	return m
}

// ran reports whether the guest reached its end marker.
func ran(res *sandbox.Result) bool {
	return res != nil && guestLines(res.Stdout)["done"] == "0"
}

func failed(err error) (string, string, bool) { return "", "could not run: " + err.Error(), false }
