package microvm

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/egress/netns"
	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/vmm"
)

// A microVM's network is an egress slot (package egress: a netns whose eth0
// leads only to the host-side nftables table, DNS stub and proxy) with a tap
// inside it, joined to eth0 at layer 2. wovyr opens the tap's descriptor
// inside the netns and hands QEMU a copy (vmm.NIC), so QEMU stays
// unprivileged, in its cgroup and under -sandbox, and never sees a network
// namespace, a device name or a path. The guest learns its address and
// gateway from the kernel command line (agent.CmdlineNet); nothing it does
// with its own kernel reaches the enforcement.
//
// When a VM gets one:
//
//   - one-shot: at Run, only when the invocation's policy allows something;
//     a deny-all invocation boots without any NIC, as without Config.Network.
//   - warm: a warm VM boots at Prepare, before any tenant is known, so with
//     Config.Network every warm VM gets a NIC on a pre-created slot that
//     denies everything; Run applies the claiming tenant's policy to the
//     slot (a deny-all policy too, which also verifies the slot is clean).
//     The pool's "slots pre-created, policy applied at claim" model.
//
// The slot lives and dies with the sandbox: Destroy kills the VM first, then
// closes the slot (table, veth, netns, tap).

// tapName is the tap's name inside the slot's netns (one VM per slot).
const tapName = "tap0"

// vmNet is one sandbox's network.
type vmNet struct {
	slot  *egress.Slot // nil only for the WeakOpenNetwork control
	tap   *os.File     // attached to tapName; QEMU gets a duplicate
	mac   net.HardwareAddr
	guest agent.VMNet
	undo  func() error // WeakOpenNetwork: removes its tap
}

// newVMNet creates a deny-all slot with a tap and opens the tap.
func (b *Backend) newVMNet(ctx context.Context) (*vmNet, error) {
	if b.cfg.weak == WeakOpenNetwork {
		return b.openVMNet()
	}
	slot, err := b.cfg.Network.NewSlot(ctx)
	if err != nil {
		return nil, err
	}
	n := &vmNet{slot: slot, mac: randomMAC(), guest: agent.VMNet{Addr: slot.Prefix(), Gateway: slot.Gateway()}}
	if err := slot.AddTap(ctx, tapName); err != nil {
		return nil, errors.Join(err, slot.Close(context.WithoutCancel(ctx)))
	}
	if n.tap, err = openTap(slot.NetnsPath(), tapName); err != nil {
		return nil, errors.Join(sandbox.Wrap(sandbox.BackendFailure, err, "open %s in %s", tapName, slot.NetnsPath()), slot.Close(context.WithoutCancel(ctx)))
	}
	return n, nil
}

// openTap attaches to the persistent tap name inside the netns at path. The
// tun ioctl looks the device up in the calling thread's netns.
func openTap(path, name string) (*os.File, error) {
	var f *os.File
	err := netns.Do(path, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			unix.Close(fd)
			return err
		}
		ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("TUNSETIFF: %w", err)
		}
		f = os.NewFile(uintptr(fd), name)
		return nil
	})
	return f, err
}

// attach gives spec the NIC and the guest its configuration.
func (n *vmNet) attach(spec *vmm.Spec) {
	spec.NIC = &vmm.NIC{Tap: n.tap, MAC: n.mac}
	spec.Cmdline += " " + agent.CmdlineNet + "=" + n.guest.String()
}

// apply binds the slot to the invocation (claim time).
func (n *vmNet) apply(ctx context.Context, inv *sandbox.Invocation) error {
	if n.slot == nil {
		return nil // the unfiltered control enforces nothing
	}
	return n.slot.Apply(ctx, egress.Binding{Tenant: inv.Tenant, Invocation: inv.ID, Policy: inv.Policy.Network})
}

// close removes the slot; the VM must be gone.
func (n *vmNet) close(ctx context.Context) error {
	if n == nil {
		return nil
	}
	n.tap.Close()
	if n.slot == nil {
		return n.undo()
	}
	return n.slot.Close(ctx)
}

// randomMAC is a fresh unicast, locally administered address per VM: no
// network identity carries over between tenants.
func randomMAC() net.HardwareAddr {
	m := make(net.HardwareAddr, 6)
	if _, err := rand.Read(m); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // never fails on Linux
	}
	m[0] = m[0]&^1 | 2
	return m
}

// CheckNetwork implements sandbox.NetworkChecker: without Config.Network a
// VM has no NIC and only deny-all is enforceable; with it, what the egress
// service can hold.
func (b *Backend) CheckNetwork(p netpolicy.Policy) error {
	if b.cfg.Network == nil {
		if !p.DenyAll() {
			return sandbox.Errorf(sandbox.Unenforceable, "policy.network", "this microvm backend has no egress service: VMs have no NIC and only deny-all egress is accepted")
		}
		return nil
	}
	return b.cfg.Network.Check(p)
}

// oneShotNet creates the network of a one-shot VM whose invocation allows
// something, bound to it; nil for deny-all.
func (s *vmSandbox) oneShotNet(ctx context.Context, inv *sandbox.Invocation) error {
	if inv.Policy.Network.DenyAll() || s.b.cfg.Network == nil {
		return nil
	}
	n, err := s.b.newVMNet(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.net = n
	s.mu.Unlock()
	return n.apply(ctx, inv)
}

var _ sandbox.NetworkChecker = (*Backend)(nil)
