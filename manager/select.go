package manager

import (
	"context"
	"fmt"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// Select returns the weakest backend that is at or above the required
// strength — max(preference, explicit floor, the trust class's floor) — and
// accepts kind, probes as available, holds a valid certification and can
// enforce the network policy. Otherwise it returns a *sandbox.FloorError
// that says, for every backend at or above the requirement, why it was not
// usable. It never returns a backend below the requirement.
func (m *Manager) Select(ctx context.Context, p sandbox.Policy, kind sandbox.WorkloadKind) (sandbox.Backend, error) {
	return m.SelectFor(ctx, p, kind, 0)
}

// Required is the strength p requires on this node: max(preference,
// explicit floor, the trust class's floor with the operator's overrides).
func (m *Manager) Required(p sandbox.Policy) sandbox.Strength { return m.floors.Required(p) }

// SelectFor is Select for a workload that needs gpus GPU devices. GPU work
// never lowers a floor: its requirement is at least the trust class's
// default floor whatever the operator's overrides, and a backend qualifies
// only if it can give devices at that strength (sandbox.GPUProvider):
// native for trusted code only, a container for trusted or internal code,
// gVisor with nvproxy, a microVM with VFIO; wasm never. Otherwise the
// FloorError says, per backend, why not.
func (m *Manager) SelectFor(ctx context.Context, p sandbox.Policy, kind sandbox.WorkloadKind, gpus int64) (sandbox.Backend, error) {
	if !p.Trust.Valid() {
		return nil, sandbox.Errorf(sandbox.BadInput, "policy.trust", "a trust class is required")
	}
	required := m.floors.Required(p)
	if gpus > 0 {
		required = max(required, sandbox.DefaultFloor(p.Trust))
	}
	var rejections []sandbox.Rejection
	for _, b := range m.backends {
		if b.Strength() < required {
			continue
		}
		why, summary := m.unusable(ctx, b, p, kind, gpus)
		if why == "" {
			m.log.Info("select", "backend", b.Name(), "required", required, "trust", p.Trust,
				"preference", p.Preference, "floor", p.Floor, "trust_floor", m.floors.Of(p.Trust), "kind", kind,
				"gpus", gpus, "skipped", len(rejections))
			return b, nil
		}
		rejections = append(rejections, sandbox.Rejection{Backend: b.Name(), Strength: b.Strength(), Reason: why, Summary: summary})
	}
	err := &sandbox.FloorError{Required: required, Kind: kind, Rejections: rejections}
	m.log.Warn("select refused", "required", required, "trust", p.Trust, "preference", p.Preference,
		"floor", p.Floor, "kind", kind, "gpus", gpus, "error", err.Error())
	return nil, err
}

// Holds says whether b may still take work of kind under p, as Select
// would choose it: at or above p's requirement, available, certified, able
// to enforce p's network. A session asks it at every resume, because its
// backend is fixed for its life: the answer is nil or a *sandbox.FloorError
// naming b alone — never another backend.
func (m *Manager) Holds(ctx context.Context, b sandbox.Backend, p sandbox.Policy, kind sandbox.WorkloadKind) error {
	required := m.floors.Required(p)
	why, summary := "", ""
	if b.Strength() < required {
		why = fmt.Sprintf("is %s, below the %s this policy requires", b.Strength(), required)
		summary = why
	} else {
		why, summary = m.unusable(ctx, b, p, kind, 0)
	}
	if why == "" {
		return nil
	}
	return &sandbox.FloorError{Required: required, Kind: kind,
		Rejections: []sandbox.Rejection{{Backend: b.Name(), Strength: b.Strength(), Reason: why, Summary: summary}}}
}

// unusable says why b cannot take the workload, or "" if it can: the
// operator's full reason and the tenant's path-free summary of it.
func (m *Manager) unusable(ctx context.Context, b sandbox.Backend, p sandbox.Policy, kind sandbox.WorkloadKind, gpus int64) (why, summary string) {
	if !sandbox.Accepts(b, kind) {
		why = fmt.Sprintf("does not run %s workloads", kind)
		return why, why
	}
	capa := m.Probe(ctx, b)
	if !capa.Available {
		return "unavailable: " + capa.Reason, sandbox.SummaryUnavailable
	}
	if gpus > 0 {
		// Before certification: an uncertified backend that could never
		// take GPU work says the GPU reason, which is the one that matters.
		if why := gpuUnusable(ctx, b, p); why != "" {
			return why, why
		}
	}
	if err := m.certified(b, capa); err != nil {
		return err.Error(), sandbox.SummaryUncertified
	}
	if gpus > 0 && !m.coversGPUs(b, capa) {
		why = "certified, but not for GPU work: no probe of the GPU rows (95-97) for it yet"
		return why, why
	}
	if !p.Network.DenyAll() {
		if !capa.Egress {
			why = "cannot enforce an egress allowlist (deny-all only)"
			return why, why
		}
		if nc, ok := b.(sandbox.NetworkChecker); ok {
			if err := nc.CheckNetwork(p.Network); err != nil {
				// The checker judges the tenant's own rules.
				return "cannot enforce this network policy: " + err.Error(),
					"cannot enforce this network policy: " + sandbox.Public(err)
			}
		}
	}
	return "", ""
}

// Prepare prepares a sandbox on b for tmpl. It is the only path to
// Backend.Prepare besides the battery, which must exercise uncertified
// backends to certify them.
func (m *Manager) Prepare(ctx context.Context, b sandbox.Backend, tmpl sandbox.Template) (sandbox.Sandbox, error) {
	sb, err := b.Prepare(ctx, tmpl)
	if err != nil {
		if sandbox.ClassOf(err) == sandbox.BackendFailure {
			return nil, fmt.Errorf("prepare on %s: %w", b.Name(), err)
		}
		return nil, err
	}
	return sb, nil
}

// Factory returns a function that prepares sandboxes of tmpl on b, for a
// pool keyed by (b, tmpl).
func (m *Manager) Factory(b sandbox.Backend, tmpl sandbox.Template) func(context.Context) (sandbox.Sandbox, error) {
	return func(ctx context.Context) (sandbox.Sandbox, error) { return m.Prepare(ctx, b, tmpl) }
}

// Run is the cold path for one invocation: validate, select, prepare, run,
// destroy. The sandbox is destroyed whatever happens.
func (m *Manager) Run(ctx context.Context, inv *sandbox.Invocation) (*sandbox.Result, error) {
	if inv.ID == "" {
		inv.ID = sandbox.NewID()
	}
	if err := inv.Validate(); err != nil {
		return nil, err
	}
	b, err := m.SelectFor(ctx, inv.Policy, inv.Workload.Kind, inv.Resources.GPU)
	if err != nil {
		return nil, err
	}
	acquired := time.Now()
	sb, err := m.prepareOrRestore(ctx, b, TemplateFor(inv))
	if err != nil {
		return nil, err
	}
	defer sb.Destroy(context.WithoutCancel(ctx))
	res, err := sb.Run(ctx, inv)
	if err != nil {
		return nil, err
	}
	res.ID = inv.ID
	res.Backend = b.Name()
	res.Timings.Acquired = acquired
	return res, nil
}

// TemplateFor is the tenant-neutral template an invocation needs.
func TemplateFor(inv *sandbox.Invocation) sandbox.Template {
	return sandbox.Template{Kind: inv.Workload.Kind, Image: inv.Workload.Image, Egress: !inv.Policy.Network.DenyAll(), GPUs: inv.GPUs}
}

// gpuUnusable says why b cannot give GPU devices to p's workload here, or
// "" if it can.
func gpuUnusable(ctx context.Context, b sandbox.Backend, p sandbox.Policy) string {
	switch {
	case b.Strength() == sandbox.Native && p.Trust != sandbox.Trusted:
		return "GPUs on native are for trusted code only"
	case b.Strength() == sandbox.Container && p.Trust != sandbox.Trusted && p.Trust != sandbox.Internal:
		return "GPUs in a container are for trusted or internal code only"
	}
	gp, ok := b.(sandbox.GPUProvider)
	if !ok {
		return "cannot give a sandbox GPU devices"
	}
	if err := gp.GPUSupport(ctx); err != nil {
		return "no GPUs: " + err.Error()
	}
	return ""
}
