package egress

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// ports the host-side listeners use; the nft DNAT rules point at them.
type listenPorts struct {
	dns, http, tls, proxy uint16 // on 127.0.0.1 in the host netns
	proxyVisible          uint16 // the explicit proxy port on the gateway
}

// slotTable is the host-side table of one slot. Its chains:
//
//	raw (prerouting, -300)  drop what the slot sends from a forged source or not as IPv4
//	dnat (nat prerouting)   allowed CIDR:ports pass untouched; DNS (any :53) goes to the
//	                        stub; gateway:ProxyPort to the explicit proxy; TCP 80/443
//	                        to the transparent proxy
//	input (filter input)    only the stub and proxy ports; everything else dropped
//	forward (filter fwd)    allowed CIDR:ports out of an uplink; replies back in; else drop
//	snat (nat postrouting)  masquerade on uplinks, when configured
//	allow (regular)         the tenant's CIDR rules; replaced atomically at Apply
type slotTable struct {
	table   *nftables.Table
	allow   *nftables.Chain
	veth    string
	gw, sb  netip.Addr
	uplinks []string
}

const allowChain = "allow"

func newNft(hostFd int, opts ...nftables.ConnOption) (*nftables.Conn, error) {
	if hostFd >= 0 {
		opts = append(opts, nftables.WithNetNSFd(hostFd))
	}
	return nftables.New(opts...)
}

func (t *slotTable) build(cc *nftables.Conn, lp listenPorts, masq bool) {
	cc.AddTable(t.table)
	accept := nftables.ChainPolicyAccept
	base := func(name string, typ nftables.ChainType, hook *nftables.ChainHook, prio *nftables.ChainPriority) *nftables.Chain {
		return cc.AddChain(&nftables.Chain{Name: name, Table: t.table, Type: typ, Hooknum: hook, Priority: prio, Policy: &accept})
	}
	rule := func(c *nftables.Chain, e ...[]expr.Any) {
		var all []expr.Any
		for _, x := range e {
			all = append(all, x...)
		}
		cc.AddRule(&nftables.Rule{Table: t.table, Chain: c, Exprs: all})
	}
	iif, oif := ifname(expr.MetaKeyIIFNAME, t.veth), ifname(expr.MetaKeyOIFNAME, t.veth)
	t.allow = cc.AddChain(&nftables.Chain{Name: allowChain, Table: t.table})

	raw := base("raw", nftables.ChainTypeFilter, nftables.ChainHookPrerouting, nftables.ChainPriorityRaw)
	rule(raw, iif, nfproto(unix.NFPROTO_IPV4, expr.CmpOpNeq), counterDrop())
	rule(raw, iif, payloadCmp(expr.PayloadBaseNetworkHeader, 12, t.sb.AsSlice(), expr.CmpOpNeq), counterDrop())

	dn := base("dnat", nftables.ChainTypeNAT, nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest)
	rule(dn, iif, verdict(expr.VerdictJump, allowChain))
	lo := netip.MustParseAddr("127.0.0.1")
	rule(dn, iif, l4(unix.IPPROTO_UDP), port(53), dnat(lo, lp.dns))
	rule(dn, iif, l4(unix.IPPROTO_TCP), port(53), dnat(lo, lp.dns))
	rule(dn, iif, payloadCmp(expr.PayloadBaseNetworkHeader, 16, t.gw.AsSlice(), expr.CmpOpEq), l4(unix.IPPROTO_TCP), port(lp.proxyVisible), dnat(lo, lp.proxy))
	rule(dn, iif, l4(unix.IPPROTO_TCP), port(80), dnat(lo, lp.http))
	rule(dn, iif, l4(unix.IPPROTO_TCP), port(443), dnat(lo, lp.tls))

	in := base("input", nftables.ChainTypeFilter, nftables.ChainHookInput, nftables.ChainPriorityFilter)
	toLo := payloadCmp(expr.PayloadBaseNetworkHeader, 16, lo.AsSlice(), expr.CmpOpEq)
	rule(in, iif, toLo, l4(unix.IPPROTO_UDP), port(lp.dns), verdict(expr.VerdictAccept, ""))
	for _, p := range []uint16{lp.dns, lp.http, lp.tls, lp.proxy} {
		rule(in, iif, toLo, l4(unix.IPPROTO_TCP), port(p), verdict(expr.VerdictAccept, ""))
	}
	rule(in, iif, counterDrop())

	fw := base("forward", nftables.ChainTypeFilter, nftables.ChainHookForward, nftables.ChainPriorityFilter)
	for _, u := range t.uplinks {
		rule(fw, iif, ifname(expr.MetaKeyOIFNAME, u), verdict(expr.VerdictJump, allowChain))
	}
	rule(fw, iif, counterDrop())
	rule(fw, oif, ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictAccept, ""))
	rule(fw, oif, counterDrop())

	if masq {
		sn := base("snat", nftables.ChainTypeNAT, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource)
		for _, u := range t.uplinks {
			rule(sn, iif, ifname(expr.MetaKeyOIFNAME, u), []expr.Any{&expr.Masq{}})
		}
	}
}

// setAllow fills the allow chain with rules (in the caller's batch),
// flushing it first unless the caller knows it is empty.
func (t *slotTable) setAllow(cc *nftables.Conn, rules []cidrAllow, flush bool) {
	if flush {
		cc.FlushChain(t.allow)
	}
	for _, r := range rules {
		for _, p := range r.ports {
			var e []expr.Any
			e = append(e, nfproto(unix.NFPROTO_IPV4, expr.CmpOpEq)...)
			e = append(e,
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
				&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: be32(r.from), ToData: be32(r.to)})
			e = append(e, l4(r.proto)...)
			e = append(e, port(p)...)
			e = append(e, &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictAccept})
			cc.AddRule(&nftables.Rule{Table: t.table, Chain: t.allow, Exprs: e})
		}
	}
}

func ifname(key expr.MetaKey, name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b}}
}

func nfproto(p byte, op expr.CmpOp) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: op, Register: 1, Data: []byte{p}}}
}

func l4(p byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}}}
}

func port(p uint16) []expr.Any {
	return payloadCmp(expr.PayloadBaseTransportHeader, 2, binaryutil.BigEndian.PutUint16(p), expr.CmpOpEq)
}

func payloadCmp(base expr.PayloadBase, off uint32, data []byte, op expr.CmpOp) []expr.Any {
	e := []expr.Any{}
	if base == expr.PayloadBaseNetworkHeader {
		e = append(e, nfproto(unix.NFPROTO_IPV4, expr.CmpOpEq)...)
	}
	return append(e,
		&expr.Payload{DestRegister: 1, Base: base, Offset: off, Len: uint32(len(data))},
		&expr.Cmp{Op: op, Register: 1, Data: data})
}

func dnat(a netip.Addr, p uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: a.AsSlice()},
		&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(p)},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
	}
}

func ctState(bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
	}
}

func verdict(k expr.VerdictKind, chain string) []expr.Any {
	return []expr.Any{&expr.Verdict{Kind: k, Chain: chain}}
}

func counterDrop() []expr.Any {
	return []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}}
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// droppedPackets sums the counters of the table's drop rules (for the
// per-invocation denial log line). It reads only this table's base chains.
func droppedPackets(cc *nftables.Conn, t *nftables.Table) (uint64, error) {
	var n uint64
	for _, name := range []string{"raw", "input", "forward"} {
		rules, err := cc.GetRules(t, &nftables.Chain{Name: name, Table: t})
		if err != nil {
			return 0, fmt.Errorf("list %s/%s: %w", t.Name, name, err)
		}
		for _, r := range rules {
			var cnt *expr.Counter
			drop := false
			for _, e := range r.Exprs {
				switch x := e.(type) {
				case *expr.Counter:
					cnt = x
				case *expr.Verdict:
					drop = x.Kind == expr.VerdictDrop
				}
			}
			if drop && cnt != nil {
				n += cnt.Packets
			}
		}
	}
	return n, nil
}
