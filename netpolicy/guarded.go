package netpolicy

import "net/netip"

// Guarded lists address ranges that a rule reaches only when it names them
// explicitly: a rule's CIDR must lie inside the guarded range (e.g.
// "169.254.169.254/32"), so "0.0.0.0/0" never includes cloud metadata,
// link-local, loopback, multicast or "this network" addresses.
var Guarded = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),          // "this network"
	netip.MustParsePrefix("127.0.0.0/8"),        // loopback
	netip.MustParsePrefix("169.254.0.0/16"),     // link-local, incl. 169.254.169.254 metadata
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba metadata
	netip.MustParsePrefix("224.0.0.0/3"),        // multicast, reserved, broadcast
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fe80::/10"),         // link-local
	netip.MustParsePrefix("fd00:ec2::254/128"), // AWS metadata over IPv6
	netip.MustParsePrefix("ff00::/8"),          // multicast
	netip.MustParsePrefix("::ffff:0:0/96"),     // v4-mapped: an alias, never a destination
}

// ExplicitlyNames reports whether the rule's CIDR lies wholly inside g, i.e.
// the rule names (part of) a guarded range on purpose.
func (r Rule) ExplicitlyNames(g netip.Prefix) bool {
	pfx, err := netip.ParsePrefix(r.CIDR)
	if err != nil {
		return false
	}
	return pfx.Addr().Is4() == g.Addr().Is4() && g.Bits() <= pfx.Bits() && g.Contains(pfx.Addr())
}
