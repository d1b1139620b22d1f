package wasm

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/sandbox"
)

// Config configures a Backend. The zero value of each field is documented;
// New validates it once.
type Config struct {
	// StateDir holds the compiled-module cache (StateDir/wasm/cache) and the
	// per-invocation workspaces (StateDir/wasm/work). Required.
	StateDir string
	// Logger receives cache and lifecycle events. Nil discards them.
	Logger *slog.Logger
	// EpochTick is the engine ticker's period: the granularity of wall
	// deadlines and cancellation. Zero means 1ms.
	EpochTick time.Duration
	// Engine shapes compiled code and the instance pool (pool slots, the
	// largest memory per instance, the wasm stack).
	Engine wasmcapi.EngineConfig
	// Preopens are host directories granted read-only to every invocation.
	// Empty means none.
	Preopens []Preopen
	// MaxModuleBytes bounds a module's size. Zero means 64 MiB.
	MaxModuleBytes int
	// Modules bounds how many linked modules are kept in memory. Zero
	// means 64.
	Modules int
	// Worker is the command line of the worker process that runs every
	// invocation granted a directory (WorkerMain; for wovyr: its own binary
	// with "wasm-worker"), so that the guest's descriptors are bounded by
	// the worker's RLIMIT_NOFILE (Limits.NoFile). Empty means no workers:
	// such invocations run in this process with no descriptor bound, which
	// battery probe 54 fails, so that configuration cannot be certified.
	Worker []string
	// Workers bounds the worker processes (jobs at once). Zero means 16.
	Workers int
	// InitWall bounds the one run of a module's init export that
	// pre-initialises it (Workload.Init, preinit.go); an init that runs
	// longer fails its invocation with class timeout. Zero means 10s.
	InitWall time.Duration
	// InitMemory bounds the linear memory of that run, in bytes. Zero
	// means 256 MiB. Both are fixed per backend, never an invocation's,
	// so no tenant's limits shape an artifact that others start from.
	InitMemory int64
	// Unprivileged runs without root, and so without workspaces: a
	// size-limited workspace is a tmpfs mount, which needs CAP_SYS_ADMIN,
	// and a plain directory would let a guest fill the disk. An invocation
	// with files in or out is then refused as policy-unenforceable
	// (ErrNoWorkspace); the rest runs as with root. It is part of the
	// config hash, so a certification of one mode never covers the other.
	// False means workspaces are tmpfs mounts, which needs root (Probe says
	// so when it is not).
	Unprivileged bool

	// weak holds deliberate weaknesses for the battery's positive controls.
	// Only probes.go sets it; New never accepts it from outside the package.
	weak weakness
}

// Preopen grants one host directory, read-only, at Guest.
type Preopen struct {
	Host  string `json:"host"`
	Guest string `json:"guest"`
}

// weakness lists what a positive control may break on purpose (weak.go).
type weakness struct {
	name            battery.Weakness
	widePreopen     bool   // probes grant a directory one level too wide
	probeSelf       bool   // the probe weakens its own attempt (no config knob)
	inheritEnv      bool   // expose the host environment
	rwPreopens      bool   // grant Config.Preopens read-write
	workspaceParent bool   // map /workspace to the workspace's parent directory
	extraRoot       string // also preopen the host's "/" at this guest path
	noDeadline      bool   // do not arm the epoch deadline
	noMemoryLimit   bool   // do not set the store's memory limit
	followSymlinks  bool   // collect files through symlinks
	noDiskQuota     bool   // a plain directory instead of a sized tmpfs
	ignoreOutputCap bool   // keep MaxOutputBytes whatever the invocation asks
	noFDBound       bool   // run directory-granted invocations in-process (no worker)
	tenantInit      bool   // pre-initialise with the first invocation's environment
}

func (w weakness) any() bool { return w != weakness{} }

const workspaceGuest = sandbox.WorkspaceDir

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.EpochTick == 0 {
		c.EpochTick = time.Millisecond
	}
	if c.MaxModuleBytes == 0 {
		c.MaxModuleBytes = 64 << 20
	}
	if c.Modules == 0 {
		c.Modules = 64
	}
	if c.Workers == 0 {
		c.Workers = 16
	}
	if c.InitWall == 0 {
		c.InitWall = 10 * time.Second
	}
	if c.InitMemory == 0 {
		c.InitMemory = sandbox.DefaultMemory
	}
	return c
}

func (c Config) validate() error {
	if c.StateDir == "" || !filepath.IsAbs(c.StateDir) {
		return sandbox.Errorf(sandbox.BadInput, "wasm.state_dir", "state dir must be an absolute path, got %q", c.StateDir)
	}
	if c.EpochTick < 100*time.Microsecond || c.EpochTick > time.Second {
		return sandbox.Errorf(sandbox.BadInput, "wasm.epoch_tick", "epoch tick %s outside [100µs, 1s]", c.EpochTick)
	}
	if len(c.Worker) > 0 && !filepath.IsAbs(c.Worker[0]) {
		return sandbox.Errorf(sandbox.BadInput, "wasm.worker", "worker program %q must be an absolute path", c.Worker[0])
	}
	if c.MaxModuleBytes < 0 || c.Modules < 0 || c.Workers < 0 || c.InitWall < 0 || c.InitMemory < 0 {
		return sandbox.Errorf(sandbox.BadInput, "wasm", "negative bounds")
	}
	seen := map[string]bool{workspaceGuest: true}
	for _, p := range c.Preopens {
		if !filepath.IsAbs(p.Host) || filepath.Clean(p.Host) != p.Host {
			return sandbox.Errorf(sandbox.BadInput, "wasm.preopens", "host path %q must be absolute and clean", p.Host)
		}
		if fi, err := os.Stat(p.Host); err != nil || !fi.IsDir() {
			return sandbox.Errorf(sandbox.BadInput, "wasm.preopens", "host path %q is not a directory", p.Host)
		}
		if !strings.HasPrefix(p.Guest, "/") || filepath.Clean(p.Guest) != p.Guest || seen[p.Guest] {
			return sandbox.Errorf(sandbox.BadInput, "wasm.preopens", "guest path %q must be absolute, clean and unique (and not %s)", p.Guest, workspaceGuest)
		}
		seen[p.Guest] = true
	}
	return nil
}

// preinitHash is the pre-initialised modules' Key.ConfigHash: the
// certification key's hash, the transformation's version and the init
// bounds.
func (c Config) preinitHash() string {
	return digest(fmt.Appendf(nil, "%s config=%s initwall=%s initmem=%d", preinitFormat, c.hash(), c.InitWall, c.InitMemory))[:32]
}

// hash digests every setting that affects isolation: the certification key.
func (c Config) hash() string {
	var b strings.Builder
	fmt.Fprintf(&b, "engine=%s tick=%s maxmod=%d", c.Engine.Hash(), c.EpochTick, c.MaxModuleBytes)
	for _, p := range c.Preopens {
		fmt.Fprintf(&b, " ro=%s:%s", p.Host, p.Guest)
	}
	fmt.Fprintf(&b, " fdbound=%v weak=%+v", len(c.Worker) > 0, c.weak)
	if c.Unprivileged { // only then, so that root's hash stays what it was
		b.WriteString(" unprivileged")
	}
	return digest([]byte(b.String()))[:32]
}
