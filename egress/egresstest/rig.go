// Package egresstest is the test rig for egress enforcement: a stand-in
// host network namespace and an "upstream" namespace holding every server
// the egress probes (BATTERY 70–84) talk to. Nothing in it has a route to a
// real network: the upstream namespace is the only thing the stand-in host
// can reach, so no probe packet can leave the machine.
//
// Upstream (netns wovyr-<tag>-rig-up), all on addresses inside 10.213.0.0/16:
//
//	10.213.200.1   "allowed" server: tcp echo 7001 7002 9000, udp echo 7003 443,
//	               whoami 7004, http 80, https 443
//	10.213.200.2   "denied" server, same services
//	10.213.200.53  authoritative DNS for "test." that records every query
//	169.254.169.254, 100.100.100.200  fake metadata (http 80 answers "local=<addr>")
//
// The stand-in host (netns wovyr-<tag>-rig-host) routes those via veth
// wv<tag>up and runs a "host service" echo on 127.0.0.1:9000 and on its
// transit address 10.213.250.1:9000, which sandboxes must never reach.
package egresstest

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/egress/netns"
)

// Rig addresses.
var (
	Allowed   = netip.MustParseAddr("10.213.200.1")
	Denied    = netip.MustParseAddr("10.213.200.2")
	DNSAddr   = netip.MustParseAddr("10.213.200.53")
	Metadata  = netip.MustParseAddr("169.254.169.254")
	AliMeta   = netip.MustParseAddr("100.100.100.200")
	HostTrans = netip.MustParseAddr("10.213.250.1")
	UpTrans   = netip.MustParseAddr("10.213.250.2")
)

// Ports of the upstream services.
const (
	EchoPort      = 7001
	EchoPort2     = 7002
	UDPEchoPort   = 7003
	WhoAmIPort    = 7004 // answers with the client's address as seen upstream
	HostSvcPort   = 9000
	rigSlotRange  = "10.213.0.0/17"
	upstreamRange = "10.213.200.0/24"
)

// Rig is a running test topology. Close removes all of it.
type Rig struct {
	Tag       string
	HostNetns string // path of the stand-in host netns
	UpNetns   string // path of the upstream netns
	Uplink    string // the stand-in host's interface toward upstream
	CA        *x509.CertPool
	CAPEM     []byte // the self-signed certificate the TLS servers use

	mu      sync.Mutex
	queries []string
	rebinds int
	closers []func() error
	names   []string
}

// New builds the rig for tag (the same tag the egress.Config under test uses).
func New(ctx context.Context, tag string) (r *Rig, err error) {
	r = &Rig{Tag: tag, Uplink: "wv" + tag + "up"}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.Close())
			r = nil
		}
	}()
	hostName, upName := fmt.Sprintf("wovyr-%s-rig-host", tag), fmt.Sprintf("wovyr-%s-rig-up", tag)
	_ = netns.Delete(hostName) // a crashed run's leftovers
	_ = netns.Delete(upName)
	for _, n := range []string{hostName, upName} {
		if err := netns.Create(n, nil); err != nil {
			return r, err
		}
		r.names = append(r.names, n)
	}
	r.HostNetns, r.UpNetns = netns.Path(hostName), netns.Path(upName)
	if err := r.wire(); err != nil {
		return r, fmt.Errorf("rig wiring: %w", err)
	}
	if err := r.startServers(); err != nil {
		return r, fmt.Errorf("rig servers: %w", err)
	}
	if err := r.startHostServices(); err != nil {
		return r, fmt.Errorf("rig host services: %w", err)
	}
	return r, nil
}

// Config is an egress configuration that uses the rig as host and upstream.
func (r *Rig) Config() egress.Config {
	return egress.Config{
		Tag:         r.Tag,
		HostNetns:   r.HostNetns,
		SlotRange:   netip.MustParsePrefix(rigSlotRange),
		UpstreamDNS: []netip.AddrPort{netip.AddrPortFrom(DNSAddr, 53)},
		Uplinks:     []string{r.Uplink},
	}
}

// Queries returns every name the authoritative server was asked, in order.
func (r *Rig) Queries() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.queries...)
}

// Close stops the servers and removes both namespaces (and with them the
// veth). Idempotent.
func (r *Rig) Close() error {
	var errs []error
	for i := len(r.closers) - 1; i >= 0; i-- {
		errs = append(errs, r.closers[i]())
	}
	r.closers = nil
	for _, n := range r.names {
		errs = append(errs, netns.Delete(n))
	}
	r.names = nil
	return errors.Join(errs...)
}

func (r *Rig) wire() error {
	hostNS, err := vnetns.GetFromPath(r.HostNetns)
	if err != nil {
		return err
	}
	defer hostNS.Close()
	upNS, err := vnetns.GetFromPath(r.UpNetns)
	if err != nil {
		return err
	}
	defer upNS.Close()
	hh, err := netlink.NewHandleAt(hostNS)
	if err != nil {
		return err
	}
	defer hh.Close()
	uh, err := netlink.NewHandleAt(upNS)
	if err != nil {
		return err
	}
	defer uh.Close()
	la := netlink.NewLinkAttrs()
	la.Name = r.Uplink
	if err := hh.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(upNS))}); err != nil {
		return fmt.Errorf("veth: %w", err)
	}
	if err := netns.Do(r.HostNetns, func() error { return netns.Sysctl("net/ipv6/conf/all/disable_ipv6", "1") }); err != nil {
		return err
	}
	if err := netns.Do(r.UpNetns, func() error { return netns.Sysctl("net/ipv6/conf/all/disable_ipv6", "1") }); err != nil {
		return err
	}
	up := func(h *netlink.Handle, name string, addrs ...string) error {
		l, err := h.LinkByName(name)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			na, err := netlink.ParseAddr(a)
			if err != nil {
				return err
			}
			if err := h.AddrAdd(l, na); err != nil {
				return fmt.Errorf("addr %s on %s: %w", a, name, err)
			}
		}
		return h.LinkSetUp(l)
	}
	if err := up(hh, "lo"); err != nil {
		return err
	}
	if err := up(hh, r.Uplink, HostTrans.String()+"/30"); err != nil {
		return err
	}
	if err := up(uh, "lo", Allowed.String()+"/32", Denied.String()+"/32", DNSAddr.String()+"/32",
		Metadata.String()+"/32", AliMeta.String()+"/32"); err != nil {
		return err
	}
	if err := up(uh, "eth0", UpTrans.String()+"/30"); err != nil {
		return err
	}
	route := func(h *netlink.Handle, dst string, gw netip.Addr) error {
		_, n, err := net.ParseCIDR(dst)
		if err != nil {
			return err
		}
		if err := h.RouteAdd(&netlink.Route{Dst: n, Gw: net.IP(gw.AsSlice())}); err != nil {
			return fmt.Errorf("route %s via %s: %w", dst, gw, err)
		}
		return nil
	}
	for _, d := range []string{upstreamRange, Metadata.String() + "/32", AliMeta.String() + "/32"} {
		if err := route(hh, d, UpTrans); err != nil {
			return err
		}
	}
	return route(uh, rigSlotRange, HostTrans)
}
