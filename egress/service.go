package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/egress/netns"
	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/sandbox"
)

// Service is the long-lived half of egress: the DNS stub and the proxy
// listeners in the host netns, and the registry that maps a slot's address
// to its current binding. Slots come from NewSlot.
type Service struct {
	cfg    Config
	log    *slog.Logger
	hostFd int // the host netns, or -1 for the current one
	hostH  *netlink.Handle
	ports  listenPorts
	stub   *stub
	proxy  *proxy

	// hostAddrs are the host netns's own addresses: never a destination,
	// whatever a name resolves to. Refreshed at NewService and NewSlot.
	hostAddrs atomic.Pointer[[]netip.Addr]

	mu     sync.Mutex
	used   map[int]*Slot
	byAddr map[netip.Addr]*Slot
	next   int
	closed bool
}

// NewService validates cfg and starts the stub and proxy listeners on
// 127.0.0.1 in the host netns. Close stops them.
func NewService(ctx context.Context, cfg Config, log *slog.Logger) (*Service, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BadInput, err, "egress config")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Service{cfg: cfg, log: log, hostFd: -1, used: map[int]*Slot{}, byAddr: map[netip.Addr]*Slot{}}
	s.ports.proxyVisible = cfg.ProxyPort
	ns := vnetns.None()
	if cfg.HostNetns != "" {
		if ns, err = vnetns.GetFromPath(cfg.HostNetns); err != nil {
			return nil, sandbox.Wrap(sandbox.BackendFailure, err, "open host netns")
		}
		s.hostFd = int(ns)
	}
	if ns.IsOpen() {
		s.hostH, err = netlink.NewHandleAt(ns)
	} else {
		s.hostH, err = netlink.NewHandle()
	}
	if err != nil {
		s.closeFd()
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "netlink")
	}
	if err := s.refreshHostAddrs(); err != nil {
		s.Close(ctx)
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "host addresses")
	}
	s.stub = &stub{svc: s}
	s.proxy = &proxy{svc: s}
	if err := netns.Do(cfg.HostNetns, func() error {
		// Replies to forwarded traffic come in on an uplink: it must
		// forward. Only the uplinks and slot veths are touched, never the
		// namespace-wide switch.
		for _, u := range cfg.Uplinks {
			if err := netns.Sysctl("net/ipv4/conf/"+u+"/forwarding", "1"); err != nil {
				return err
			}
		}
		if err := s.stub.listen(); err != nil {
			return err
		}
		return s.proxy.listen()
	}); err != nil {
		s.Close(ctx)
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "egress listeners")
	}
	s.ports.dns = s.stub.port
	s.ports.http, s.ports.tls, s.ports.proxy = s.proxy.ports()
	s.stub.serve()
	s.proxy.serve()
	log.Info("egress service up", "tag", cfg.Tag, "slot_range", cfg.SlotRange, "dns_port", s.ports.dns,
		"http_port", s.ports.http, "tls_port", s.ports.tls, "proxy_port", s.ports.proxy, "uplinks", cfg.Uplinks)
	return s, nil
}

// HostNetns is the path of the namespace that plays the host (Config.HostNetns;
// empty: the current one). The battery's positive controls join it.
func (s *Service) HostNetns() string { return s.cfg.HostNetns }

// ProxyPort is the explicit proxy's port on every slot's gateway, as a
// sandbox in a slot reaches it (Slot.ProxyAddr).
func (s *Service) ProxyPort() uint16 { return s.ports.proxyVisible }

// Check reports whether this node can enforce p (see Config.Check).
func (s *Service) Check(p netpolicy.Policy) error { return s.cfg.Check(p) }

// Close stops the listeners and closes every slot still open. Idempotent.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var open []*Slot
	for _, sl := range s.used {
		open = append(open, sl)
	}
	s.mu.Unlock()
	var errs []error
	for _, sl := range open {
		errs = append(errs, sl.Close(ctx))
	}
	if s.stub != nil {
		s.stub.close()
	}
	if s.proxy != nil {
		s.proxy.close()
	}
	if s.hostH != nil {
		s.hostH.Close()
	}
	s.closeFd()
	return errors.Join(errs...)
}

func (s *Service) closeFd() {
	if s.hostFd >= 0 {
		unix.Close(s.hostFd)
		s.hostFd = -1
	}
}

// NewSlot builds a slot (netns, veth, host-side table) that denies
// everything until Apply. Pools call it ahead of demand.
func (s *Service) NewSlot(ctx context.Context) (*Slot, error) {
	if err := s.refreshHostAddrs(); err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "host addresses")
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "egress service is closed")
	}
	idx := -1
	for n := 0; n < s.cfg.slots(); n++ {
		i := (s.next + n) % s.cfg.slots()
		if _, busy := s.used[i]; !busy {
			idx = i
			break
		}
	}
	if idx < 0 {
		s.mu.Unlock()
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "all %d network slots are in use", s.cfg.slots())
	}
	s.next = idx + 1
	gw, sb := s.cfg.slotAddrs(idx)
	sl := &Slot{svc: s, idx: idx, ns: s.cfg.netnsName(idx), table: &slotTable{
		table: &nftables.Table{Name: s.cfg.tableName(idx), Family: nftables.TableFamilyINet},
		veth:  s.cfg.vethName(idx), gw: gw, sb: sb, uplinks: s.cfg.Uplinks,
	}}
	s.used[idx] = sl
	s.mu.Unlock()
	if err := s.buildSlot(sl); err != nil {
		sl.closeHandles()
		err = errors.Join(err, s.destroySlot(idx))
		s.freeSlot(sl)
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "create network slot %s", sl.ns)
	}
	sl.clean = true
	s.mu.Lock()
	s.byAddr[sb] = sl
	s.mu.Unlock()
	return sl, nil
}

// buildSlot is the ordered list of creation steps; a failure names its step.
func (s *Service) buildSlot(sl *Slot) error {
	t := sl.table
	err := netns.Create(sl.ns, func() error {
		for _, k := range []string{"net/ipv6/conf/all/disable_ipv6", "net/ipv6/conf/default/disable_ipv6"} {
			if err := netns.Sysctl(k, "1"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	slotNS, err := vnetns.GetFromPath(sl.NetnsPath())
	if err != nil {
		return fmt.Errorf("open netns: %w", err)
	}
	defer slotNS.Close()
	la := netlink.NewLinkAttrs()
	la.Name = t.veth
	if err := s.hostH.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(slotNS))}); err != nil {
		return fmt.Errorf("veth: %w", err)
	}
	if err := netns.Do(s.cfg.HostNetns, func() error {
		conf := map[string]string{
			"net/ipv6/conf/" + t.veth + "/disable_ipv6":   "1",
			"net/ipv4/conf/" + t.veth + "/route_localnet": "1", // DNAT to the 127.0.0.1 listeners
			"net/ipv4/conf/" + t.veth + "/forwarding":     "0",
			"net/ipv4/conf/" + t.veth + "/accept_local":   "0",
		}
		if len(s.cfg.Uplinks) > 0 {
			conf["net/ipv4/conf/"+t.veth+"/forwarding"] = "1"
		}
		for k, v := range conf {
			if err := netns.Sysctl(k, v); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("host sysctls: %w", err)
	}
	host, err := s.hostH.LinkByName(t.veth)
	if err != nil {
		return fmt.Errorf("host veth: %w", err)
	}
	if err := s.hostH.AddrReplace(host, addr(t.gw, 30)); err != nil {
		return fmt.Errorf("host address: %w", err)
	}
	if err := s.hostH.LinkSetUp(host); err != nil {
		return fmt.Errorf("host veth up: %w", err)
	}
	if err := sl.openHandles(); err != nil {
		return err
	}
	if err := sl.scrubNetns(); err != nil {
		return fmt.Errorf("slot side: %w", err)
	}
	if sl.nft, err = newNft(s.hostFd, nftables.AsLasting()); err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t.build(sl.nft, s.ports, s.cfg.Masquerade)
	if err := sl.nft.Flush(); err != nil {
		return fmt.Errorf("nft table %s: %w", t.table.Name, err)
	}
	return nil
}

// configSlotSide makes the inside what it was built as: lo and eth0 up,
// exactly sb/30 on eth0, only the kernel's routes plus the default route via
// the gateway (which leads only to the host-side table). It reads first and
// writes only what differs, so verifying a clean slot is cheap.
func configSlotSide(h *netlink.Handle, links []netlink.Link, eth netlink.Link, sb, gw netip.Addr) error {
	for _, l := range links {
		if l.Attrs().Flags&net.FlagUp == 0 {
			if err := h.LinkSetUp(l); err != nil {
				return fmt.Errorf("slot %s up: %w", l.Attrs().Name, err)
			}
		}
	}
	addrs, err := h.AddrList(eth, unix.AF_UNSPEC)
	if err != nil {
		return err
	}
	want := addr(sb, 30)
	have := false
	for _, a := range addrs {
		if a.Equal(*want) {
			have = true
			continue
		}
		if err := h.AddrDel(eth, &a); err != nil {
			return fmt.Errorf("drop stray address %s: %w", a.IPNet, err)
		}
	}
	if !have {
		if err := h.AddrReplace(eth, want); err != nil {
			return fmt.Errorf("slot address: %w", err)
		}
	}
	routes, err := h.RouteList(nil, unix.AF_INET)
	if err != nil {
		return err
	}
	gwIP := net.IP(gw.AsSlice())
	haveDef := false
	for _, r := range routes {
		switch {
		case r.Protocol == unix.RTPROT_KERNEL:
		case isDefault(r) && r.Gw.Equal(gwIP) && r.LinkIndex == eth.Attrs().Index && !haveDef:
			haveDef = true
		default:
			r := r
			if err := h.RouteDel(&r); err != nil {
				return fmt.Errorf("drop stray route %s: %w", r, err)
			}
		}
	}
	if !haveDef {
		def := &netlink.Route{LinkIndex: eth.Attrs().Index, Gw: gwIP, Dst: &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}}
		if err := h.RouteReplace(def); err != nil {
			return fmt.Errorf("slot default route: %w", err)
		}
	}
	return nil
}

// destroySlot removes slot idx's table, veth and netns, whatever exists.
func (s *Service) destroySlot(idx int) error {
	var errs []error
	if cc, err := newNft(s.hostFd); err != nil {
		errs = append(errs, err)
	} else {
		cc.DelTable(&nftables.Table{Name: s.cfg.tableName(idx), Family: nftables.TableFamilyINet})
		if err := cc.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("delete table: %w", err))
		}
	}
	if l, err := s.hostH.LinkByName(s.cfg.vethName(idx)); err == nil {
		if err := s.hostH.LinkDel(l); err != nil {
			errs = append(errs, fmt.Errorf("delete veth: %w", err))
		}
	}
	if err := netns.Delete(s.cfg.netnsName(idx)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (s *Service) freeSlot(sl *Slot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used[sl.idx] == sl {
		delete(s.used, sl.idx)
	}
	if s.byAddr[sl.table.sb] == sl {
		delete(s.byAddr, sl.table.sb)
	}
}

// lookup returns the binding in force for a source address, or nil.
func (s *Service) lookup(src netip.Addr) (*Slot, *binding) {
	s.mu.Lock()
	sl := s.byAddr[src.Unmap()]
	s.mu.Unlock()
	if sl == nil {
		return nil, nil
	}
	return sl, sl.bind.Load()
}

// dial connects from the host netns to dst.
func (s *Service) dial(ctx context.Context, network string, dst netip.AddrPort) (net.Conn, error) {
	var c net.Conn
	err := netns.Do(s.cfg.HostNetns, func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, dst.String())
		return err
	})
	return c, err
}

func addr(a netip.Addr, bits int) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(bits, 32)}}
}

func isDefault(r netlink.Route) bool {
	if r.Dst == nil {
		return true
	}
	ones, _ := r.Dst.Mask.Size()
	return ones == 0
}

// refreshHostAddrs snapshots the host netns's IPv4 addresses.
func (s *Service) refreshHostAddrs() error {
	addrs, err := s.hostH.AddrList(nil, unix.AF_INET)
	if err != nil {
		return err
	}
	var out []netip.Addr
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok {
			out = append(out, ip)
		}
	}
	s.hostAddrs.Store(&out)
	return nil
}

// reserved reports whether ip may never be a destination for a name:
// guarded, in the slot range, configured as reserved, or the host's own.
func (s *Service) reserved(ip netip.Addr) bool {
	if s.cfg.reservedAddr(ip) {
		return true
	}
	if p := s.hostAddrs.Load(); p != nil {
		return slices.Contains(*p, ip.Unmap())
	}
	return false
}
