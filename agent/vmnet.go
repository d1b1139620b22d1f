package agent

import (
	"fmt"
	"net/netip"
	"strings"
)

// CmdlineNet is the kernel command-line key that gives a microVM its one
// NIC's configuration (VMNet.String). Without it the guest loads no network
// driver and configures nothing: a VM without a NIC has only loopback.
const CmdlineNet = "wovyr.net"

// VMNet is a microVM's network, fixed by the host's egress slot: the
// guest's address and prefix on its NIC, and the gateway, which is also its
// resolver (the egress stub) and explicit proxy. The guest's kernel is the
// tenant's, so nothing here is enforcement: the host-side table, stub and
// proxy hold the policy whatever the guest configures.
type VMNet struct {
	Addr    netip.Prefix // e.g. 10.213.0.2/30
	Gateway netip.Addr   // e.g. 10.213.0.1
}

// String is the command-line form, "10.213.0.2/30,10.213.0.1".
func (n VMNet) String() string { return n.Addr.String() + "," + n.Gateway.String() }

// ParseVMNet parses the command-line form and checks it: IPv4 only, the
// gateway inside the prefix and not the guest's own address.
func ParseVMNet(s string) (VMNet, error) {
	a, g, ok := strings.Cut(s, ",")
	if !ok {
		return VMNet{}, fmt.Errorf("%s=%q: want ADDR/BITS,GATEWAY", CmdlineNet, s)
	}
	pfx, err := netip.ParsePrefix(a)
	if err != nil {
		return VMNet{}, fmt.Errorf("%s: %w", CmdlineNet, err)
	}
	gw, err := netip.ParseAddr(g)
	if err != nil {
		return VMNet{}, fmt.Errorf("%s: %w", CmdlineNet, err)
	}
	n := VMNet{Addr: pfx, Gateway: gw}
	switch {
	case !pfx.Addr().Is4() || !gw.Is4():
		return VMNet{}, fmt.Errorf("%s=%q: IPv4 only", CmdlineNet, s)
	case pfx.Bits() < 8 || pfx.Bits() > 30:
		return VMNet{}, fmt.Errorf("%s=%q: prefix length must be 8..30", CmdlineNet, s)
	case !pfx.Masked().Contains(gw) || gw == pfx.Addr():
		return VMNet{}, fmt.Errorf("%s=%q: the gateway must be another address inside the prefix", CmdlineNet, s)
	}
	return n, nil
}

// ResolvConf is the guest's /etc/resolv.conf: the gateway's stub only.
func (n VMNet) ResolvConf() []byte {
	return []byte("nameserver " + n.Gateway.String() + "\noptions timeout:2 attempts:1\n")
}
