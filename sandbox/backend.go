package sandbox

import (
	"context"
	"slices"

	"github.com/wovyr/wovyr/netpolicy"
)

// Backend is one isolation technology. Implementations live in backend/<name>
// and are wired explicitly in cmd/wovyr; there is no registration by init().
type Backend interface {
	// Name is the backend's stable name ("native", "wasm", …).
	Name() string
	// Strength is its fixed position on the isolation spectrum.
	Strength() Strength
	// Kinds lists the workload kinds it accepts, natural or through a runner.
	Kinds() []WorkloadKind
	// Probe says whether it works on this node right now. It must actually
	// exercise the runtime (bounded by ctx), not just look for a binary.
	Probe(ctx context.Context) Capability
	// Prepare makes a warm, tenant-neutral sandbox for tmpl. Tenant policy
	// is applied later, at Run.
	Prepare(ctx context.Context, tmpl Template) (Sandbox, error)
}

// Capability is a probe's answer.
type Capability struct {
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"` // why not, when unavailable
	// Version identifies the runtime (e.g. "crun 1.8.1"); part of the
	// certification key, so a runtime upgrade voids a certification.
	Version string `json:"version,omitempty"`
	// ConfigHash digests every setting that affects isolation (flags,
	// profiles, limits policy); also part of the certification key.
	ConfigHash string `json:"config_hash,omitempty"`
	Accel      string `json:"accel,omitempty"` // "kvm", "tcg", "ptrace", "systrap", …
	// Egress reports that the backend enforces non-empty allowlists. A
	// backend without it accepts deny-all network policies only.
	Egress bool `json:"egress"`
	// Unprivileged reports that the backend runs without root, offering
	// less than it does with root (what, its Features and docs say). It is
	// recorded in certifications; the mode is also in ConfigHash.
	Unprivileged bool     `json:"unprivileged,omitempty"`
	Features     []string `json:"features,omitempty"`
}

// GPUProvider is a backend that can give a sandbox GPU devices. The
// manager sends GPU work only to a backend that implements it and whose
// GPUSupport answers nil; a backend that does not is refused for GPU work.
type GPUProvider interface {
	// GPUSupport says why this node's backend cannot give a sandbox GPUs
	// (a tenant-safe sentence, no host paths), or nil when it can.
	GPUSupport(ctx context.Context) error
}

// Accepts reports whether b takes workloads of kind k.
func Accepts(b Backend, k WorkloadKind) bool { return slices.Contains(b.Kinds(), k) }

// Template is what a warm sandbox is prepared for: tenant-neutral.
type Template struct {
	Kind  WorkloadKind `json:"kind"`
	Image string       `json:"image,omitempty"` // root filesystem template
	// Shape is the resource envelope the sandbox is sized for.
	Limits Limits `json:"limits"`
	// Egress asks for a sandbox that can carry an egress allowlist: what a
	// backend whose network is fixed when its sandbox starts (gVisor's
	// netstack in an egress slot, ADR 0009) must know at Prepare. Which
	// allowlist, and whose, is still bound only at Run.
	Egress bool `json:"egress,omitempty"`
	// GPUs are devices a backend must build into the sandbox (a container's
	// device nodes exist from its start). Nil for every template but one
	// made for an invocation's assigned devices; such a sandbox serves only
	// an invocation holding exactly these devices.
	GPUs []GPUDevice `json:"-"`
}

// Sandbox is one prepared sandbox. It runs at most one invocation unless the
// backend also implements Resetter, or holds one session if it implements
// Session (session.go); Destroy is idempotent and must release everything
// the sandbox holds (processes, mounts, cgroups, files).
type Sandbox interface {
	// Run applies inv's policy and limits (claim time) and runs it. A nil
	// error means the workload ran and Result says how it ended (its Class
	// may be Timeout, OOM, …). A non-nil error means it could not run; it
	// is typed (BadInput, Unenforceable, BackendFailure).
	Run(ctx context.Context, inv *Invocation) (*Result, error)
	// Destroy tears the sandbox down. It must succeed even if ctx is done.
	Destroy(ctx context.Context) error
}

// ProbeCacher is implemented by backends whose probe answer may be reused
// by later processes while nothing it depends on has changed (package
// probecache). A backend without it is probed by every process.
type ProbeCacher interface {
	// ProbeKey digests everything Probe's answer depends on: the binaries
	// it runs, identified by their files (probecache.KeyBuilder), and the
	// configuration. It must be cheap: stats and hashing, no exec. An
	// empty key means this answer must not be reused.
	ProbeKey() string
	// Adopt takes capa, the answer of an earlier Probe under the same key,
	// as this backend's own, restoring whatever Probe would have chosen
	// (a runtime, an accelerator) without running it. An error means it
	// cannot; the manager then probes for real.
	Adopt(ctx context.Context, capa Capability) error
}

// Resetter is implemented by sandboxes that can return to a verified clean,
// tenant-neutral state after a run. Reset must verify, not assume: an error
// means the sandbox must be destroyed.
type Resetter interface {
	Reset(ctx context.Context) error
}

// NetworkChecker is implemented by backends whose egress enforcement
// depends on the policy itself (a CIDR rule needs an uplink, say). The
// manager asks it at Select time, so an unenforceable policy is refused
// before anything is prepared rather than at Run.
type NetworkChecker interface {
	CheckNetwork(p netpolicy.Policy) error
}

// ImageChecker is implemented by backends that run command workloads in a
// named root filesystem template. CheckImage says, without side effects,
// whether name (empty: the backend's default) can run here; if not, a
// BadInput error naming workload.image. The daemon and `wovyr run` ask it
// right after Select, so an unknown image is a 400 with nothing recorded
// or started (issue #25: it was a 200 with a failed record, and the pool
// for it kept failing to prepare).
type ImageChecker interface {
	CheckImage(name string) error
}

// WorkloadChecker is implemented by backends that refuse some workloads of
// a kind they accept, for what this node's configuration cannot enforce
// (the unprivileged wasm backend refuses files in or out). CheckWorkload
// says so without side effects, with a typed error; `wovyr run` and the
// daemon ask it right after Select (CheckRunnable), so nothing is recorded
// or started.
type WorkloadChecker interface {
	CheckWorkload(w *Workload) error
}

// CheckRunnable asks b's ImageChecker (command workloads) and
// WorkloadChecker, where b has them, whether b can run w here.
func CheckRunnable(b Backend, w *Workload) error {
	if ic, ok := b.(ImageChecker); ok && w.Kind == KindCommand {
		if err := ic.CheckImage(w.Image); err != nil {
			return err
		}
	}
	if wc, ok := b.(WorkloadChecker); ok {
		return wc.CheckWorkload(w)
	}
	return nil
}
