package egress

import (
	"fmt"
	"net/netip"
	"regexp"

	"github.com/wovyr/wovyr/netpolicy"
)

// Config says where egress enforcement lives and which addresses it uses.
// The zero Config is usable: it runs in the current network namespace with
// the defaults below and forwards nothing (names go through the proxy only).
type Config struct {
	// Tag distinguishes wovyr instances on one machine: every name this
	// package creates embeds it (netns "wovyr-<tag>-s<N>", nft table
	// "wovyr_<tag>_s<N>", host veth "wv<tag><N>"), and Reconcile removes
	// exactly those. 1..4 letters (no digits, so "wv<tag><N>" parses one
	// way only); zero means "e".
	Tag string
	// HostNetns is the path of the network namespace that plays the host:
	// slot veths' host ends, the nft tables, the stub and proxy listeners
	// and the proxy's outbound connections live there. Empty means the
	// current namespace (production). Tests point it at a namespace they
	// created, so nothing touches the real host's networking.
	HostNetns string
	// SlotRange is carved into one /30 per slot (host .1, sandbox .2).
	// Zero means 10.213.0.0/17. It is always unreachable from a slot.
	SlotRange netip.Prefix
	// UpstreamDNS are the resolvers the stub asks for allowed names, from
	// the host side. Empty: allowed names do not resolve (NXDOMAIN).
	UpstreamDNS []netip.AddrPort
	// Uplinks are the host interfaces that forwarded (CIDR-rule) traffic may
	// leave by; NewService turns on IPv4 forwarding on each (per interface,
	// not ip_forward). Empty: nothing is forwarded and CIDR rules are
	// refused as unenforceable; names still work through the proxy.
	Uplinks []string
	// Masquerade source-NATs forwarded traffic leaving by Uplinks
	// (production, where slot addresses are not routed). Tests leave it off.
	Masquerade bool
	// Reserved are further ranges no rule ever reaches (the host's own
	// addresses, other infrastructure), in addition to SlotRange and
	// netpolicy.Guarded.
	Reserved []netip.Prefix
	// ProxyPort is the explicit proxy port a sandbox sees on its gateway
	// (HTTP_PROXY=http://<gateway>:<ProxyPort>). Zero means 3128.
	ProxyPort uint16
	// MaxConnsPerSlot bounds concurrent proxied connections per slot.
	// Zero means 256.
	MaxConnsPerSlot int
}

var tagRE = regexp.MustCompile(`^[a-z]{1,4}$`)

// withDefaults returns c with zero fields defaulted, or a BadInput-style error.
func (c Config) withDefaults() (Config, error) {
	if c.Tag == "" {
		c.Tag = "e"
	}
	if !tagRE.MatchString(c.Tag) {
		return c, fmt.Errorf("egress: tag %q must match %s", c.Tag, tagRE)
	}
	if !c.SlotRange.IsValid() {
		c.SlotRange = netip.MustParsePrefix("10.213.0.0/17")
	}
	if !c.SlotRange.Addr().Is4() || c.SlotRange.Bits() > 29 || c.SlotRange.Masked() != c.SlotRange {
		return c, fmt.Errorf("egress: slot range %s must be a canonical IPv4 prefix of /29 or wider", c.SlotRange)
	}
	if c.ProxyPort == 0 {
		c.ProxyPort = 3128
	}
	if c.MaxConnsPerSlot == 0 {
		c.MaxConnsPerSlot = 256
	}
	for _, u := range c.Uplinks {
		if u == "" || len(u) > 15 {
			return c, fmt.Errorf("egress: bad uplink interface name %q", u)
		}
	}
	return c, nil
}

// slots is how many /30 slots the range holds.
func (c Config) slots() int { return 1 << (32 - c.SlotRange.Bits() - 2) }

// slotAddrs returns the host-side (gateway) and sandbox addresses of slot i.
func (c Config) slotAddrs(i int) (gw, sb netip.Addr) {
	b := c.SlotRange.Addr().As4()
	base := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	base += uint32(i) * 4
	return u32addr(base + 1), u32addr(base + 2)
}

func (c Config) netnsName(i int) string { return fmt.Sprintf("wovyr-%s-s%d", c.Tag, i) }
func (c Config) tableName(i int) string { return fmt.Sprintf("wovyr_%s_s%d", c.Tag, i) }
func (c Config) vethName(i int) string  { return fmt.Sprintf("wv%s%d", c.Tag, i) }

func u32addr(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func addrU32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// reservedAddr reports whether ip is never a destination for a name:
// guarded (metadata, link-local, loopback, …), in the slot range, or reserved.
func (c Config) reservedAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	if c.SlotRange.Contains(ip) {
		return true
	}
	for _, g := range netpolicy.Guarded {
		if g.Contains(ip) {
			return true
		}
	}
	for _, g := range c.Reserved {
		if g.Contains(ip) {
			return true
		}
	}
	return false
}
