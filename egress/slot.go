package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// Binding is what Apply attaches to a slot: whose traffic it is and what
// that traffic may reach. Invocation is logged with every decision.
type Binding struct {
	Tenant     string
	Invocation string
	Policy     netpolicy.Policy
}

// binding is a Binding in force, with what the stub resolved under it.
type binding struct {
	Binding
	rules []cidrAllow
	conns atomic.Int32

	mu       sync.Mutex
	resolved map[string]map[netip.Addr]struct{} // name → addresses handed out
	live     map[io.Closer]struct{}             // open proxied connections, both sides
	ended    bool
}

// track registers a proxied connection so that the binding's end closes
// it; false means the binding has already ended.
func (b *binding) track(c io.Closer) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return false
	}
	if b.live == nil {
		b.live = map[io.Closer]struct{}{}
	}
	b.live[c] = struct{}{}
	return true
}

func (b *binding) untrack(c io.Closer) {
	b.mu.Lock()
	delete(b.live, c)
	b.mu.Unlock()
}

// end closes every proxied connection still open under the binding: no
// stream outlives the invocation it belongs to.
func (b *binding) end() {
	b.mu.Lock()
	live := b.live
	b.live, b.ended = nil, true
	b.mu.Unlock()
	for c := range live {
		_ = c.Close()
	}
}

func (b *binding) remember(name string, ips []netip.Addr) {
	b.mu.Lock()
	defer b.mu.Unlock()
	set := b.resolved[name]
	if set == nil {
		set = map[netip.Addr]struct{}{}
		b.resolved[name] = set
	}
	for _, ip := range ips {
		set[ip] = struct{}{}
	}
}

// pinned reports whether the stub handed ip to this sandbox for name.
func (b *binding) pinned(name string, ip netip.Addr) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.resolved[name][ip.Unmap()]
	return ok
}

// pinnedAny reports whether the stub handed ip to this binding for some
// name that the policy allows on port.
func (b *binding) pinnedAny(ip netip.Addr, port uint16) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for name, set := range b.resolved {
		if _, ok := set[ip]; ok && b.Policy.AllowsName(name, port) {
			return true
		}
	}
	return false
}

// Slot is one sandbox's network: a netns with a veth to the host netns and
// a host-side nft table. A fresh or released slot allows nothing; Apply
// binds it to one tenant's invocation. A Slot is used by one owner at a time.
type Slot struct {
	svc   *Service
	idx   int
	ns    string
	table *slotTable
	nft   *nftables.Conn  // lasting, to the host netns; only the owner uses it
	in    *nftables.Conn  // lasting, inside the slot's netns
	h     *netlink.Handle // rtnetlink inside the slot's netns
	bind  atomic.Pointer[binding]
	clean bool     // released and wiped since the last binding
	taps  []string // microVM taps the scrub keeps (AddTap)

	closeMu sync.Mutex // Close may race with Service.Close at shutdown
	closed  bool
}

// NetnsPath is the slot's network namespace, for setns(2), nsenter --net=
// or an OCI spec's network namespace path.
func (s *Slot) NetnsPath() string { return netns.Path(s.ns) }

// Addr is the sandbox's address (on eth0 inside the netns).
func (s *Slot) Addr() netip.Addr { return s.table.sb }

// Gateway is the host side of the veth: the sandbox's resolver and proxy.
func (s *Slot) Gateway() netip.Addr { return s.table.gw }

// Veth is the host-side interface name (e.g. for a microVM's tap bridge).
func (s *Slot) Veth() string { return s.table.veth }

// Env is what a sandbox's environment should carry so that proxy-aware
// clients use the explicit proxy (others are redirected transparently).
func (s *Slot) Env() []string {
	u := fmt.Sprintf("http://%s", s.ProxyAddr())
	return []string{"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u, "NO_PROXY=", "no_proxy="}
}

// ProxyAddr is the explicit proxy's address as seen from inside the slot.
func (s *Slot) ProxyAddr() netip.AddrPort {
	return netip.AddrPortFrom(s.Gateway(), s.svc.ports.proxyVisible)
}

// ResolvConf is an /etc/resolv.conf naming the stub. (Any query to port 53
// reaches the stub anyway; this only saves clients a timeout elsewhere.)
func (s *Slot) ResolvConf() []byte {
	return []byte(fmt.Sprintf("nameserver %s\noptions timeout:2 attempts:1\n", s.Gateway()))
}

// Apply binds the slot to b: b.Policy's CIDR rules go into the host-side
// allow chain (one atomic nftables batch), its names into the stub and
// proxy. A slot still bound to someone is released (wiped) first; a clean
// one is only verified, which keeps claim time low. It returns a BadInput
// or Unenforceable *sandbox.Error for a policy this node cannot hold,
// before touching the slot.
func (s *Slot) Apply(ctx context.Context, b Binding) error {
	if !sandbox.ValidTenant(b.Tenant) {
		return sandbox.Errorf(sandbox.BadInput, "tenant", "tenant %q is not a valid name", b.Tenant)
	}
	rules, err := s.svc.cfg.compile(b.Policy)
	if err != nil {
		return err
	}
	if !s.clean {
		if err := s.Release(ctx); err != nil {
			return err
		}
	}
	// Verify, not assume: nothing may have changed in the netns since the
	// wipe, but re-asserting it costs well under a millisecond.
	if err := s.scrubNetns(); err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "verify slot %s", s.ns)
	}
	s.clean = false
	s.table.setAllow(s.nft, rules, false)
	if err := s.nft.Flush(); err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "apply policy to %s", s.table.table.Name)
	}
	nb := &binding{Binding: b, rules: rules, resolved: map[string]map[netip.Addr]struct{}{}}
	s.bind.Store(nb)
	s.svc.log.Info("egress apply", "slot", s.ns, "tenant", b.Tenant, "invocation", b.Invocation,
		"rules", len(b.Policy.Allow), "nft_rules", len(rules))
	return nil
}

// Release returns the slot to deny-all and wipes it for the next tenant:
// the binding and everything the stub resolved under it are forgotten, the
// allow chain is emptied, the netns is restored to its built state, the
// previous tenant's conntrack entries go, and the packets the table dropped
// under the binding are logged. Call it when the tenant's processes are gone.
func (s *Slot) Release(ctx context.Context) error {
	old := s.bind.Swap(nil)
	if old != nil {
		old.end()
		n, err := droppedPackets(s.nft, s.table.table)
		s.svc.log.Info("egress release", "slot", s.ns, "tenant", old.Tenant, "invocation", old.Invocation,
			"dropped_packets", n, "count_error", err)
	}
	s.nft.FlushChain(s.table.allow)
	if err := s.nft.Flush(); err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "release %s", s.table.table.Name)
	}
	if err := s.scrubNetns(); err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "wipe slot %s", s.ns)
	}
	f := &netlink.ConntrackFilter{}
	if err := f.AddIP(netlink.ConntrackOrigSrcIP, net.IP(s.table.sb.AsSlice())); err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "conntrack filter")
	}
	if _, err := s.svc.hostH.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, f); err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "flush conntrack of %s", s.table.sb)
	}
	s.clean = true
	return nil
}

// scrubNetns restores the slot's netns to its built state: no nft ruleset,
// no extra links, exactly one address and the default route on eth0.
func (s *Slot) scrubNetns() error {
	s.in.FlushRuleset()
	if err := s.in.Flush(); err != nil {
		return fmt.Errorf("flush in-slot ruleset: %w", err)
	}
	links, err := s.h.LinkList()
	if err != nil {
		return err
	}
	var eth netlink.Link
	var keep []netlink.Link
	for _, l := range links {
		switch l.Attrs().Name {
		case "lo":
			keep = append(keep, l)
		case "eth0":
			eth = l
			keep = append(keep, l)
		default:
			if slices.Contains(s.taps, l.Attrs().Name) {
				keep = append(keep, l)
				continue
			}
			if err := s.h.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
				return fmt.Errorf("delete stray link %s: %w", l.Attrs().Name, err)
			}
		}
	}
	if eth == nil {
		return errors.New("eth0 is gone from the slot")
	}
	return configSlotSide(s.h, keep, eth, s.table.sb, s.table.gw)
}

// Close releases the slot and removes its table, veth and netns. It is
// idempotent and ignores ctx's cancellation. Processes still inside the
// netns keep it alive but lose its name and route; backends kill them first.
func (s *Slot) Close(ctx context.Context) error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if old := s.bind.Swap(nil); old != nil {
		old.end()
		s.svc.log.Info("egress close", "slot", s.ns, "tenant", old.Tenant, "invocation", old.Invocation)
	}
	s.closeHandles()
	err := s.svc.destroySlot(s.idx)
	s.svc.freeSlot(s)
	return err
}

// openHandles opens the slot's lasting netlink sockets (claim-time work
// then costs round trips, not socket set-up).
func (s *Slot) openHandles() error {
	ns, err := vnetns.GetFromPath(s.NetnsPath())
	if err != nil {
		return fmt.Errorf("open %s: %w", s.NetnsPath(), err)
	}
	defer ns.Close()
	if s.h, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE); err != nil {
		return fmt.Errorf("netlink in %s: %w", s.ns, err)
	}
	if s.in, err = nftables.New(nftables.WithNetNSFd(int(ns)), nftables.AsLasting()); err != nil {
		return fmt.Errorf("nftables in %s: %w", s.ns, err)
	}
	return nil
}

// closeHandles closes the sockets that would otherwise keep the netns alive.
func (s *Slot) closeHandles() {
	if s.nft != nil {
		_ = s.nft.CloseLasting()
		s.nft = nil
	}
	if s.in != nil {
		_ = s.in.CloseLasting()
		s.in = nil
	}
	if s.h != nil {
		s.h.Close()
		s.h = nil
	}
}
