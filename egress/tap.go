package egress

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/egress/netns"
	"github.com/wovyr/wovyr/sandbox"
)

var tapRE = regexp.MustCompile(`^tap[0-9]{1,3}$`)

// AddTap gives a microVM its network: a persistent tap device inside the
// slot's netns, joined to eth0 at layer 2 by tc mirred redirects both ways
// (everything arriving on one leaves by the other). QEMU started inside the
// netns with "-netdev tap,ifname=<name>,script=no,downscript=no" then puts
// the guest on the slot's wire: the guest configures Addr()/30 with
// Gateway() as its router and resolver, and meets exactly the host-side
// table, stub and proxy a native process meets. The guest's kernel is its
// own, so nothing it configures reaches the enforcement.
//
// The tap survives Release and Apply (they keep registered taps) and goes
// with the slot. name is "tap" and 1–3 digits.
func (s *Slot) AddTap(ctx context.Context, name string) error {
	if !tapRE.MatchString(name) {
		return sandbox.Errorf(sandbox.BadInput, "tap", "tap name %q must match %s", name, tapRE)
	}
	err := netns.Do(s.NetnsPath(), func() error {
		// The tun ioctl creates the device in the calling thread's netns.
		return netlink.LinkAdd(&netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: name}, Mode: netlink.TUNTAP_MODE_TAP, Flags: netlink.TUNTAP_DEFAULTS | netlink.TUNTAP_NO_PI})
	})
	if err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "create %s in %s", name, s.ns)
	}
	s.taps = append(s.taps, name)
	if err := s.wireTap(name); err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "wire %s in %s", name, s.ns)
	}
	return nil
}

func (s *Slot) wireTap(name string) error {
	tap, err := s.h.LinkByName(name)
	if err != nil {
		return err
	}
	eth, err := s.h.LinkByName("eth0")
	if err != nil {
		return err
	}
	if err := s.h.LinkSetUp(tap); err != nil {
		return err
	}
	for _, pair := range [][2]netlink.Link{{eth, tap}, {tap, eth}} {
		from, to := pair[0].Attrs().Index, pair[1].Attrs().Index
		q := &netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: from, Parent: netlink.HANDLE_INGRESS, Handle: netlink.MakeHandle(0xffff, 0)}}
		if err := s.h.QdiscReplace(q); err != nil {
			return fmt.Errorf("ingress qdisc: %w", err)
		}
		f := &netlink.U32{
			FilterAttrs: netlink.FilterAttrs{LinkIndex: from, Parent: netlink.MakeHandle(0xffff, 0), Priority: 1, Protocol: unix.ETH_P_ALL},
			Actions:     []netlink.Action{netlink.NewMirredAction(to)},
		}
		if err := s.h.FilterReplace(f); err != nil {
			return fmt.Errorf("mirred %d→%d: %w", from, to, err)
		}
	}
	return nil
}

// Prefix is the sandbox's address with the slot's prefix length, as a
// microVM guest configures it on its NIC.
func (s *Slot) Prefix() netip.Prefix { return netip.PrefixFrom(s.table.sb, 30) }
