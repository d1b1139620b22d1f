package egress

import (
	"net/netip"
	"slices"

	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/sandbox"
)

// cidrAllow is one compiled CIDR rule: an inclusive IPv4 interval with the
// guarded and reserved ranges already cut out, a protocol and ports.
type cidrAllow struct {
	from, to uint32
	proto    byte // unix.IPPROTO_TCP or IPPROTO_UDP
	ports    []uint16
}

// Check validates p and reports whether this configuration can enforce it:
// BadInput for a malformed policy, Unenforceable for one it cannot hold
// (IPv6 CIDRs; CIDR rules without an uplink). Backends call it at Select
// time; Apply calls it again.
func (c Config) Check(p netpolicy.Policy) error {
	_, err := c.compile(p)
	return err
}

func (c Config) compile(p netpolicy.Policy) ([]cidrAllow, error) {
	if err := p.Validate(); err != nil {
		f := "policy.network"
		if e, ok := err.(*netpolicy.Error); ok {
			f = e.Path()
		}
		return nil, &sandbox.Error{Class: sandbox.BadInput, Field: f, Msg: "invalid network policy", Err: err}
	}
	var out []cidrAllow
	for i, r := range p.Allow {
		if r.CIDR == "" {
			continue
		}
		pfx := netip.MustParsePrefix(r.CIDR)
		if !pfx.Addr().Is4() {
			return nil, sandbox.Errorf(sandbox.Unenforceable, "policy.network.allow", "rule %d: IPv6 egress is not enforced by wovyr yet (slots are IPv4-only)", i)
		}
		if len(c.Uplinks) == 0 {
			return nil, sandbox.Errorf(sandbox.Unenforceable, "policy.network.allow", "rule %d: CIDR rules need an uplink; this node forwards nothing", i)
		}
		ivs := [][2]uint32{{addrU32(pfx.Addr()), addrU32(pfx.Addr()) | (1<<(32-pfx.Bits()) - 1)}}
		cut := []netip.Prefix{c.SlotRange}
		cut = append(cut, c.Reserved...)
		for _, g := range netpolicy.Guarded {
			if !r.ExplicitlyNames(g) {
				cut = append(cut, g)
			}
		}
		for _, g := range cut {
			if g.Addr().Is4() {
				ivs = subtract(ivs, addrU32(g.Addr()), addrU32(g.Addr())|(1<<(32-g.Bits())-1))
			}
		}
		proto := byte(6)
		if r.Proto() == "udp" {
			proto = 17
		}
		ports := slices.Clone(r.Ports)
		slices.Sort(ports)
		ports = slices.Compact(ports)
		for _, iv := range ivs {
			out = append(out, cidrAllow{from: iv[0], to: iv[1], proto: proto, ports: ports})
		}
	}
	return out, nil
}

// subtract removes [lo,hi] from every interval in ivs.
func subtract(ivs [][2]uint32, lo, hi uint32) [][2]uint32 {
	var out [][2]uint32
	for _, iv := range ivs {
		if hi < iv[0] || lo > iv[1] {
			out = append(out, iv)
			continue
		}
		if lo > iv[0] {
			out = append(out, [2]uint32{iv[0], lo - 1})
		}
		if hi < iv[1] {
			out = append(out, [2]uint32{hi + 1, iv[1]})
		}
	}
	return out
}

// ipAllowed reports whether a compiled rule set allows proto to ip:port
// (used by the proxy for IP-literal CONNECT targets).
func ipAllowed(rules []cidrAllow, ip netip.Addr, proto byte, port uint16) bool {
	if !ip.Is4() {
		return false
	}
	v := addrU32(ip)
	for _, r := range rules {
		if r.proto == proto && v >= r.from && v <= r.to && slices.Contains(r.ports, port) {
			return true
		}
	}
	return false
}
