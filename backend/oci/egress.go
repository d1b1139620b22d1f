package oci

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/egress/egresstest"
	"github.com/wovyr/wovyr/egress/netns"
	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/sandbox"
)

// Egress for the container backend (issue 9).
//
// With Config.Network, Prepare creates an egress slot per sandbox (a netns
// with one veth to the host, deny-all host-side table) and the container
// joins it by path instead of getting a fresh loopback-only netns; Run binds
// the slot to the tenant's policy (Slot.Apply) before the job is sent, and
// Destroy closes it after the container is gone. The slot's netns is owned
// by the host's user namespace, so the container's root — unprivileged, no
// capabilities, in its own user namespace — can change nothing in it (no
// links, addresses, routes or nft rules): everything that enforces the
// policy is on the host side anyway.
//
// # Why /sys is a tmpfs in a slot
//
// sysfs belongs to a network namespace: mounting it needs CAP_SYS_ADMIN
// over the netns's owning user namespace, which the container never has
// over a host-owned slot. The runtimes then fall back to bind-mounting the
// host's /sys (read-only), which would show the host's devices and
// interfaces. A sandbox in a slot gets an empty, small tmpfs at /sys
// instead (cgroupfs still mounts below it).
//
// # gVisor (ADR 0009, option 1)
//
// gVisor keeps --network=none for every sandbox a deny-all invocation gets:
// no interface at all, nothing to enforce. A sandbox prepared for an
// allowlist (Template.Egress) gets a slot too, and runsc runs with
// --network=sandbox inside it: the Sentry's own TCP/IP stack (netstack)
// takes over the slot's eth0 and speaks Ethernet on it, so the host kernel
// sees only frames on the veth, filtered by the same host-side table, stub
// and proxy as a container's, and no socket call of the workload reaches
// the host's network stack. runsc moves the interface's address into
// netstack, so such a sandbox is one-shot (the slot is bound before runsc
// starts, and a later Apply would put the address back under it) and the
// slot is closed, never reused.

// resolvConf is the in-sandbox resolver file bound from the sandbox's dir.
const resolvConf = "/etc/resolv.conf"

// egressOn reports whether every sandbox of b is prepared inside an egress
// slot (the container backend with an egress service).
func (b *Backend) egressOn() bool { return b.cfg.Network != nil && !b.gvisor }

// egressCapable reports whether b enforces allowlists: every sandbox of the
// container backend, and gVisor's netstack sandboxes, sit in slots.
func (b *Backend) egressCapable() bool { return b.cfg.Network != nil }

// inSlot reports whether this sandbox has an egress slot.
func (s *Sandbox) inSlot() bool { return s.b.egressOn() || s.boot.netstack }

// netstack is d running its sandboxes' networking in the Sentry
// (--network=sandbox) instead of none; a weakened driver's other network
// flag is kept.
func (d *driver) netstack() *driver {
	n := *d
	n.flags = slices.Clone(d.flags)
	for i, f := range n.flags {
		if f == "--network=none" {
			n.flags[i] = "--network=sandbox"
		}
	}
	return &n
}

// CheckNetwork implements sandbox.NetworkChecker: a typed error for a
// policy this backend cannot enforce, before anything is claimed.
func (b *Backend) CheckNetwork(p netpolicy.Policy) error {
	switch {
	case p.DenyAll():
		return nil
	case b.cfg.Network == nil && b.gvisor:
		return sandbox.Errorf(sandbox.Unenforceable, "policy.network",
			"gvisor backend without an egress service runs with --network=none and enforces deny-all egress only (ADR 0009)")
	case b.cfg.Network == nil:
		return sandbox.Errorf(sandbox.Unenforceable, "policy.network",
			"%s backend without an egress service enforces deny-all egress only (loopback-only network namespace)", b.name)
	}
	return b.cfg.Network.Check(p)
}

// newNetwork gives the sandbox its egress slot (Prepare; deny-all until
// Run) and writes the resolv.conf naming the slot's stub.
func (s *Sandbox) newNetwork(ctx context.Context) error {
	if !s.inSlot() {
		return nil
	}
	sl, err := s.b.cfg.Network.NewSlot(ctx)
	if err != nil {
		return err
	}
	s.net = sl
	s.defer1(func(ctx context.Context) error { return sl.Close(ctx) })
	return os.WriteFile(filepath.Join(s.dir, "resolv.conf"), sl.ResolvConf(), 0o444)
}

// checkNetwork refuses, before anything is claimed, an allowlist this
// sandbox has no interface for: a gVisor sandbox prepared without
// Template.Egress.
func (s *Sandbox) checkNetwork(p netpolicy.Policy) error {
	if err := s.b.CheckNetwork(p); err != nil {
		return err
	}
	if s.net == nil && !p.DenyAll() {
		return sandbox.Errorf(sandbox.Unenforceable, "policy.network",
			"%s sandbox %s was prepared without a network (template.egress false): it enforces deny-all only", s.b.name, s.id)
	}
	return nil
}

// applyNetwork binds the slot to inv's tenant and policy (claim time). A
// deny-all policy is applied too: Apply also verifies the slot is clean.
func (s *Sandbox) applyNetwork(ctx context.Context, inv *sandbox.Invocation) error {
	if s.net == nil {
		return nil
	}
	p := inv.Policy.Network
	if s.b.weak == EgressOpen {
		p = egresstest.OpenPolicy() // positive control: the tenant's allowlist is ignored
	}
	return s.net.Apply(ctx, egress.Binding{Tenant: inv.Tenant, Invocation: inv.ID, Policy: p})
}

// joinSlot points spec at the slot's netns (by path), binds resolv (a host
// file) read-only at /etc/resolv.conf and replaces sysfs by a tmpfs.
func joinSlot(spec *specs.Spec, netnsPath, resolv string) {
	for i, n := range spec.Linux.Namespaces {
		if n.Type == specs.NetworkNamespace {
			spec.Linux.Namespaces[i].Path = netnsPath
		}
	}
	for i, m := range spec.Mounts {
		if m.Destination == "/sys" && m.Type == "sysfs" {
			spec.Mounts[i] = specs.Mount{Destination: "/sys", Type: "tmpfs", Source: "tmpfs",
				Options: []string{"nosuid", "noexec", "nodev", "mode=755", "size=64k"}}
		}
	}
	spec.Mounts = append(spec.Mounts, specs.Mount{Destination: resolvConf, Type: "bind", Source: resolv,
		Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
}

// slotNetns and slotResolv report whether a spec's network namespace path
// and a bind mount are what joinSlot writes (LintSpec accepts only these).
func slotNetns(path string) bool {
	return filepath.Dir(path) == netns.Dir && strings.HasPrefix(filepath.Base(path), "wovyr-")
}

func slotResolv(m specs.Mount) bool {
	return m.Type == "bind" && m.Destination == resolvConf && filepath.Base(m.Source) == "resolv.conf" &&
		slices.Contains(m.Options, "ro")
}

// hashNetwork adds the egress wiring to a config hash's spec: every
// sandbox's (container), or the netstack sandboxes' (gVisor, which also
// hashes the flag through the driver's flags: Probe's egress-netstack run).
func (b *Backend) hashNetwork(spec *specs.Spec) {
	if spec != nil && b.egressCapable() {
		joinSlot(spec, netns.Path("wovyr-slot"), "/resolv.conf")
	}
}

// Weaknesses of the egress wiring, for the battery's positive controls.
const (
	// EgressOpen: the slot is bound to egresstest.OpenPolicy instead of the tenant's
	// allowlist (every port the rows use, metadata named explicitly, every
	// name the rig serves).
	EgressOpen battery.Weakness = "egress-open"
	// EgressHostNetns: the container joins the egress service's host
	// namespace instead of its slot (no host-side table in the way).
	EgressHostNetns battery.Weakness = "egress-host-netns"
)

// netnsPath is the network namespace the sandbox's spec joins.
func (s *Sandbox) netnsPath() string {
	if s.b.weak == EgressHostNetns {
		if h := s.b.cfg.Network.HostNetns(); h != "" {
			return h
		}
		return "/proc/1/ns/net"
	}
	return s.net.NetnsPath()
}

// withNetwork is a copy of b (weakness included) whose sandboxes use svc.
func (b *Backend) withNetwork(svc *egress.Service) *Backend {
	b.mu.Lock()
	defer b.mu.Unlock()
	cfg := b.cfg
	cfg.Network = svc
	return &Backend{cfg: cfg, name: b.name, strength: b.strength, gvisor: b.gvisor,
		agent: b.agent, run: b.run, driver: b.driver, weak: b.weak}
}
