package native

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/egress/egresstest"
	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/sandbox"
)

// newNetwork returns the network namespace a sandbox's workload runs in:
// with Config.Network, a pre-created egress slot (deny-all until Run binds
// it to the tenant); without, an empty namespace.
func (b *Backend) newNetwork(ctx context.Context) (*os.File, *egress.Slot, error) {
	if b.net == nil {
		f, err := newNetns()
		return f, nil, err
	}
	slot, err := b.net.NewSlot(ctx)
	if err != nil {
		return nil, nil, err
	}
	path := slot.NetnsPath()
	if b.weak == EgressHostNetns {
		// Positive control: the service's host namespace, never the real
		// host's (the battery wires it to a rig's stand-in host).
		if path = b.net.HostNetns(); path == "" {
			return nil, nil, errors.Join(sandbox.Errorf(sandbox.BackendFailure, "", "the %s control needs an egress service with its own host namespace", EgressHostNetns), slot.Close(ctx))
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("open slot netns: %w", err), slot.Close(ctx))
	}
	return f, slot, nil
}

func (b *Backend) netKind() string {
	if b.net == nil {
		return "empty"
	}
	return "egress-slot"
}

// CheckNetwork implements sandbox.NetworkChecker.
func (b *Backend) CheckNetwork(p netpolicy.Policy) error {
	if b.net == nil {
		if !p.DenyAll() {
			return sandbox.Errorf(sandbox.Unenforceable, "policy.network", "native backend without an egress service enforces deny-all egress only")
		}
		return nil
	}
	return b.net.Check(p)
}

// checkNetwork refuses, before anything is claimed, a policy this sandbox
// cannot enforce.
func (s *nativeSandbox) checkNetwork(inv *sandbox.Invocation) error {
	return s.b.CheckNetwork(inv.Policy.Network)
}

// applyNetwork binds the slot to the invocation (claim time). A deny-all
// policy is applied too: it also verifies the slot is clean.
func (s *nativeSandbox) applyNetwork(ctx context.Context, inv *sandbox.Invocation) error {
	if s.slot == nil {
		return nil
	}
	p := inv.Policy.Network
	if s.b.weak == EgressOpen {
		p = egresstest.OpenPolicy() // positive control: the tenant's allowlist is ignored
	}
	return s.slot.Apply(ctx, egress.Binding{Tenant: inv.Tenant, Invocation: inv.ID, Policy: p})
}
