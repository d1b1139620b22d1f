// Package native is the weakest backend: the workload is a host process. It
// exists for trusted (first-party) code, where a process boundary is enough
// and start-up cost matters most.
//
// What it promises, and tests: the environment is exactly the invocation's;
// the process runs as an unprivileged uid in a fresh workspace (a tmpfs sized
// to the disk limit) inside its own cgroup (memory, pids, CPU) and session,
// with rlimits applied before its first instruction; it has its own network
// namespace — empty (no egress at all), or, with Config.Network, an egress
// slot enforcing the invocation's allowlist from outside; the cgroup finds and kills
// every descendant at the end, double-forked daemons included.
//
// What it does not promise: a private view of the host filesystem, /proc or
// IPC. That is what the stronger backends are for, and why the manager only
// lets trusted code land here.
//
// # Why ptrace at start
//
// Limits must hold from the first instruction, but os/exec runs no code
// between fork and exec and cgroup v1 cannot place a child at clone time.
// Starting the child traced stops it right after execve; wovyr then sets its
// rlimits, moves it into its cgroup and detaches. This costs one stop and
// costs far less than re-executing a helper binary. (rlimits belong to the
// whole process, so no wovyr thread can hold them for the child to inherit.)
//
// # What Prepare does so that Run is short
//
// Run is what an invocation waits for, so everything that does not depend
// on the invocation happens at Prepare: the cgroup gets the template's
// limits (Run writes only those that differ) and a thread is parked in the
// sandbox's network namespace with no_new_privs and the workload's real
// ids, ready to fork (see spawner). Run opens the cgroup's files while that
// thread forks: opening is most of a v1 move's cost, and held from Prepare
// the fds of many idle sandboxes would slow every fork wovyr makes.
//
// The forking thread is not put inside the cgroup: a wovyr thread there
// would be a candidate for the group's OOM killer (scored by all of wovyr's
// memory), be stopped by the freezer while it may hold a Go runtime lock,
// and count against pids.max.
package native

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/cgroup"
	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/sandbox"
)

// Config configures the native backend. The zero Config is usable.
type Config struct {
	// ScratchDir holds per-sandbox workspaces. Zero means
	// os.TempDir()/wovyr-native.
	ScratchDir string
	// UIDBase and UIDCount give the host uid range for sandboxes: each
	// live sandbox runs as its own uid (gid the same number). Zero means
	// DefaultUIDBase and DefaultUIDCount.
	UIDBase  uint32
	UIDCount int
	// Logger receives lifecycle logs. Nil means slog.Default().
	Logger *slog.Logger
	// Network enforces egress allowlists: each sandbox runs in a network
	// slot of this service, bound to the tenant's policy at Run. Nil means
	// an empty network namespace per sandbox and deny-all policies only.
	Network *egress.Service
}

// Backend runs workloads as host processes.
type Backend struct {
	scratch string
	uids    *uidRange
	log     *slog.Logger
	net     *egress.Service
	// weak is set only on copies made by Weakened, for the battery's
	// positive controls.
	weak battery.Weakness
}

// New returns a native backend.
func New(cfg Config) (*Backend, error) {
	b := &Backend{scratch: cfg.ScratchDir, log: cfg.Logger, net: cfg.Network}
	if b.scratch == "" {
		b.scratch = filepath.Join(os.TempDir(), "wovyr-native")
	}
	base, n := cfg.UIDBase, cfg.UIDCount
	if base == 0 {
		base = DefaultUIDBase
	}
	if n <= 0 {
		n = DefaultUIDCount
	}
	b.uids = newUIDRange(base, n)
	if b.log == nil {
		b.log = slog.Default()
	}
	if n > 1<<20 || uint64(base)+uint64(n) > 1<<32-2 {
		return nil, fmt.Errorf("native: uid range %d+%d is too large", base, n)
	}
	return b, nil
}

// Name implements sandbox.Backend.
func (b *Backend) Name() string { return "native" }

// Strength implements sandbox.Backend.
func (b *Backend) Strength() sandbox.Strength { return sandbox.Native }

// Kinds implements sandbox.Backend.
func (b *Backend) Kinds() []sandbox.WorkloadKind { return []sandbox.WorkloadKind{sandbox.KindCommand} }

// GPUSupport implements sandbox.GPUProvider: a native process is told its
// assigned devices by NVIDIA_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES only
// (a host process could open any device node), which is why the manager
// gives native GPUs for trusted code only.
func (b *Backend) GPUSupport(context.Context) error { return nil }

// version changes whenever what the backend enforces changes, voiding
// earlier certifications.
const version = "wovyr-native/1"

// Probe runs /bin/true through the full path: cgroup, traced start,
// workspace mount.
func (b *Backend) Probe(ctx context.Context) sandbox.Capability {
	capa := sandbox.Capability{Version: version, ConfigHash: b.configHash(), Features: []string{"cgroup-v1"}, Egress: b.net != nil}
	if cgroup.V2() {
		capa.Features = []string{"cgroup-v2"}
	}
	if os.Geteuid() != 0 {
		capa.Reason = "needs root (cgroups, tmpfs workspaces, per-sandbox uids)"
		return capa
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	sb, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		capa.Reason = err.Error()
		return capa
	}
	defer sb.Destroy(context.WithoutCancel(ctx))
	res, err := sb.Run(ctx, &sandbox.Invocation{
		Tenant:   "wovyr-probe",
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/true"}},
		Policy:   sandbox.Policy{Trust: sandbox.Trusted},
	})
	switch {
	case err != nil:
		capa.Reason = err.Error()
	case res.Class != sandbox.OK || res.ExitCode != 0:
		capa.Reason = fmt.Sprintf("probe run of /bin/true: class %q exit %d: %s", res.Class, res.ExitCode, res.Error)
	default:
		capa.Available = true
	}
	return capa
}

func (b *Backend) configHash() string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s uids=%d+%d netns=%s nnp ws=tmpfs rlimits=core0,nofile,fsize,cpu weak=%q",
		version, b.uids.base, len(b.uids.used), b.netCert(), b.weak))
	return hex.EncodeToString(h[:8])
}

// Weakened implements battery.Weakener: a copy of b with one weakness, for
// positive controls. It shares b's uid range and scratch directory.
func (b *Backend) Weakened(w battery.Weakness) (sandbox.Backend, error) {
	switch w {
	case battery.RunAsRoot, battery.NoRlimits, battery.InheritEnv, battery.SharedUID, battery.HostNetwork,
		battery.NoPidsLimit, battery.NoMemoryLimit, battery.NoDiskQuota, battery.NoDeadline, battery.NoOutputCap,
		battery.KeepOrphans, battery.TraceStopAsExit, EgressOpen, EgressHostNetns:
		if b.net == nil && (w == EgressOpen || w == EgressHostNetns) {
			return nil, fmt.Errorf("native without an egress service has no %q configuration", w)
		}
		c := *b
		c.weak = w
		return &c, nil
	}
	return nil, fmt.Errorf("native has no %q configuration", w)
}

// Prepare makes a tenant-neutral sandbox: an empty, mounted workspace, a
// cgroup with tmpl's limits, a network namespace and a parked forking
// thread. Each prepared sandbox holds one OS thread and a few fds until it
// runs or is destroyed.
func (b *Backend) Prepare(ctx context.Context, tmpl sandbox.Template) (sandbox.Sandbox, error) {
	if tmpl.Kind != "" && tmpl.Kind != sandbox.KindCommand {
		return nil, sandbox.Errorf(sandbox.BadInput, "workload.kind", "native runs command workloads, not %s", tmpl.Kind)
	}
	// Traversable, not listable, by the workloads' uids.
	if err := os.MkdirAll(b.scratch, 0o711); err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "native: scratch dir")
	}
	if err := os.Chmod(b.scratch, 0o711); err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "native: scratch dir")
	}
	return newSandbox(ctx, b, sandbox.NewID(), tmpl)
}

// Reconcile removes workspaces left by a crashed wovyr (unmounting them
// first) and the cgroups below cgroup.Prefix.
func (b *Backend) Reconcile(ctx context.Context) error {
	return reconcileScratch(b.scratch)
}
