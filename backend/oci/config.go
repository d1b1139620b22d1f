package oci

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/idmap"
	"github.com/wovyr/wovyr/sandbox"
)

// Config configures a backend. It is read once, by NewContainer/NewGVisor.
type Config struct {
	// StateDir is wovyr's state directory: templates are read from
	// <StateDir>/images/<name>, scratch lives under <StateDir>/run/oci.
	// Required. Its ancestors must be searchable by others (mode o+x):
	// the runtimes resolve the bundle as the sandbox's unprivileged uid.
	StateDir string
	// Agent is the path of a static wovyr-guest binary (CGO_ENABLED=0). It
	// is copied into the state directory and bind-mounted read-only into
	// every sandbox as its init. Empty means "wovyr-guest" next to the
	// running executable.
	Agent string
	// WasmRunner is the path of a static build of the wovyr binary (cgo,
	// linked with -extldflags -static: its `wasm-exec` subcommand embeds
	// Wasmtime). Copied like Agent and bind-mounted read-only into every
	// sandbox, it runs wasm workloads inside the container or gVisor
	// boundary. Empty: these backends accept command workloads only.
	WasmRunner string
	// Runtime forces one runtime binary: "crun" or "runc" for container,
	// "runsc" for gvisor, or a path to a binary of that name. Empty (or
	// "auto") picks by probing: crun then runc for container, runsc for
	// gvisor. The runtime's name and version are part of the backend's
	// certification key, so each runtime is certified on its own.
	Runtime string
	// Platform forces runsc's --platform. Empty probes systrap then
	// ptrace; "kvm" is refused unless set explicitly here.
	Platform string
	// UIDBase is the first host uid/gid of the sandbox ranges. Zero means
	// 2^31. Each live sandbox gets its own 65536 ids above it.
	UIDBase uint32
	// Slots bounds concurrent sandboxes (distinct uid ranges). Zero: 1024.
	Slots int
	// ProbeTimeout bounds one probe container. Zero: 20s.
	ProbeTimeout time.Duration
	// DefaultImage is the template for workloads that name none. Empty:
	// "busybox".
	DefaultImage string
	// Logger receives lifecycle logs. Nil discards them.
	Logger *slog.Logger
	// Pooled prepares sandboxes that wait in a warm pool for their claim,
	// trading a slower Prepare for a faster claimed Run:
	//   - Prepare runs one tenant-neutral exec (the template's /bin/sh -c :)
	//     before it returns: a sandbox's first exec pays for cold caches
	//     (under gVisor the Sentry's first new address space and its file
	//     cache of the template's binaries);
	//   - gVisor sandboxes are born on one host CPU each (cpus.go), which
	//     keeps an idle sandbox's first exec fast but slows the Sentry's
	//     boot.
	// One-shot use leaves it off: there both would only add.
	Pooled bool
	// Snapshots lets a pooled gVisor backend offer golden snapshots and
	// clones (sandbox.Snapshotter; snapshot.go), so that pools and
	// one-shot runs restore instead of starting cold. Off by default:
	// measured on these machines a runsc restore costs as much as a cold
	// pooled start, and more to the first result (ADR 0020). Ignored by
	// the container backend and without Pooled.
	Snapshots bool
	// Network, if set, gives sandboxes allowlisted egress: each container
	// sandbox, and each gVisor sandbox prepared for an allowlist
	// (Template.Egress: runsc's netstack in the slot, ADR 0009), is
	// prepared inside its own slot of this service (deny-all until Run
	// applies the tenant's policy; see egress.go). Nil: a loopback-only
	// network namespace (gVisor: --network=none) and deny-all policies only.
	Network *egress.Service
	// EgressProbe is the host path of a static egress probe
	// (egress/egresstest/egressprobe, CGO_ENABLED=0) that the battery
	// ships into container sandboxes for rows 71–84 when Network is set.
	// Empty means "wovyr-egressprobe" next to the running executable.
	EgressProbe string
}

const rangeSize = 65536

func (c Config) withDefaults() (Config, error) {
	if c.StateDir == "" {
		return c, errors.New("oci: Config.StateDir is required")
	}
	abs, err := filepath.Abs(c.StateDir)
	if err != nil {
		return c, err
	}
	c.StateDir = abs
	if c.Agent == "" {
		exe, err := os.Executable()
		if err != nil {
			return c, fmt.Errorf("oci: locate agent: %w", err)
		}
		c.Agent = filepath.Join(filepath.Dir(exe), "wovyr-guest")
	}
	if c.EgressProbe == "" {
		exe, err := os.Executable()
		if err != nil {
			return c, fmt.Errorf("oci: locate egress probe: %w", err)
		}
		c.EgressProbe = filepath.Join(filepath.Dir(exe), "wovyr-egressprobe")
	}
	if c.UIDBase == 0 {
		c.UIDBase = 1 << 31
	}
	if c.Slots == 0 {
		c.Slots = 1024
	}
	if c.Slots < 0 || !(idmap.Range{HostUID: c.UIDBase, HostGID: c.UIDBase, Size: uint32(c.Slots) * rangeSize}).Valid() {
		return c, fmt.Errorf("oci: %d slots of %d ids from %d do not fit in the uid space", c.Slots, rangeSize, c.UIDBase)
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = 20 * time.Second
	}
	if c.DefaultImage == "" {
		c.DefaultImage = "busybox"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c, nil
}

// checkRuntime validates Runtime for the container (gvisor false) or gvisor
// backend and returns it with "auto" made empty.
func (c Config) checkRuntime(gvisor bool) (string, error) {
	if c.Runtime == "" || c.Runtime == "auto" {
		return "", nil
	}
	allowed := []string{"crun", "runc"}
	if gvisor {
		allowed = []string{"runsc"}
	}
	if !slices.Contains(allowed, filepath.Base(c.Runtime)) {
		return "", sandbox.Errorf(sandbox.BadInput, "runtime", "runtime %q: want auto or one of %v (or a path to one)", c.Runtime, allowed)
	}
	return c.Runtime, nil
}

// runDir is the root of everything this package creates under the state dir.
func runDir(stateDir string) string { return filepath.Join(stateDir, "run", "oci") }
