package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
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

// Slot is one sandbox's network: a netns with a veth to the host netns and
// a host-side nft table. A fresh or released slot allows nothing; Apply
// binds it to one tenant's invocation. A Slot is used by one owner at a time.
type Slot struct {
	svc    *Service
	idx    int
	ns     string
	table  *slotTable
	bind   atomic.Pointer[binding]
	closed bool
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
	u := fmt.Sprintf("http://%s", netip.AddrPortFrom(s.Gateway(), s.svc.ports.proxyVisible))
	return []string{"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u, "NO_PROXY=", "no_proxy="}
}

// ResolvConf is an /etc/resolv.conf naming the stub. (Any query to port 53
// reaches the stub anyway; this only saves clients a timeout elsewhere.)
func (s *Slot) ResolvConf() []byte {
	return []byte(fmt.Sprintf("nameserver %s\noptions timeout:2 attempts:1\n", s.Gateway()))
}

// Start starts cmd with its network namespace set to the slot's. Children
// and re-executed programs inherit it; nothing inside can leave it without
// CAP_SYS_ADMIN, and the filtering is outside it.
func (s *Slot) Start(cmd *exec.Cmd) error {
	return netns.Do(s.NetnsPath(), cmd.Start)
}

// Apply wipes what a previous tenant may have left in the netns, then binds
// the slot to b: b.Policy's CIDR rules go into the host-side table (one
// atomic nftables batch), its names into the stub and proxy. It returns a
// BadInput or Unenforceable *sandbox.Error for a policy this node cannot
// hold, leaving the slot denying everything.
func (s *Slot) Apply(ctx context.Context, b Binding) error {
	if !sandbox.ValidTenant(b.Tenant) {
		return sandbox.Errorf(sandbox.BadInput, "tenant", "tenant %q is not a valid name", b.Tenant)
	}
	rules, err := s.svc.cfg.compile(b.Policy)
	if err != nil {
		return err
	}
	if err := s.Release(ctx); err != nil {
		return err
	}
	if err := s.scrub(); err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "wipe slot %s", s.ns)
	}
	cc, err := newNft(s.svc.hostFd)
	if err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "nftables")
	}
	s.table.setAllow(cc, rules)
	if err := cc.Flush(); err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "apply policy to %s", s.table.table.Name)
	}
	nb := &binding{Binding: b, rules: rules, resolved: map[string]map[netip.Addr]struct{}{}}
	s.bind.Store(nb)
	s.svc.log.Info("egress apply", "slot", s.ns, "tenant", b.Tenant, "invocation", b.Invocation,
		"rules", len(b.Policy.Allow), "cidr_rules", len(rules))
	return nil
}

// Release returns the slot to deny-all: the binding and everything the
// stub resolved under it are forgotten, the allow chain is emptied and the
// packets the table dropped under it are logged.
func (s *Slot) Release(ctx context.Context) error {
	old := s.bind.Swap(nil)
	cc, err := newNft(s.svc.hostFd)
	if err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "nftables")
	}
	cc.FlushChain(s.table.allow)
	if err := cc.Flush(); err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "release %s", s.table.table.Name)
	}
	if old != nil {
		n, err := droppedPackets(cc, s.table.table)
		s.svc.log.Info("egress release", "slot", s.ns, "tenant", old.Tenant, "invocation", old.Invocation,
			"dropped_packets", n, "count_error", err)
	}
	return nil
}

// scrub restores the slot's netns to its built state: no nft ruleset, no
// extra links, exactly one address and the default route on eth0, and no
// conntrack entries of the previous tenant on the host side.
func (s *Slot) scrub() error {
	h, closeH, err := slotHandle(s.NetnsPath())
	if err != nil {
		return err
	}
	defer closeH()
	fd, err := unix.Open(s.NetnsPath(), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	in, err := nftables.New(nftables.WithNetNSFd(fd))
	if err != nil {
		return err
	}
	in.FlushRuleset()
	if err := in.Flush(); err != nil {
		return fmt.Errorf("flush in-slot ruleset: %w", err)
	}
	links, err := h.LinkList()
	if err != nil {
		return err
	}
	var eth netlink.Link
	for _, l := range links {
		switch l.Attrs().Name {
		case "lo":
		case "eth0":
			eth = l
		default:
			if err := h.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
				return fmt.Errorf("delete stray link %s: %w", l.Attrs().Name, err)
			}
		}
	}
	if eth == nil {
		return errors.New("eth0 is gone from the slot")
	}
	if err := s.svc.configSlotSide(h, eth, s.table.sb, s.table.gw); err != nil {
		return err
	}
	f := &netlink.ConntrackFilter{}
	if err := f.AddIP(netlink.ConntrackOrigSrcIP, net.IP(s.table.sb.AsSlice())); err != nil {
		return err
	}
	if _, err := s.svc.hostH.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, f); err != nil {
		return fmt.Errorf("flush conntrack of %s: %w", s.table.sb, err)
	}
	return nil
}

// Close releases the slot and removes its table, veth and netns. It is
// idempotent and ignores ctx's cancellation. Processes still inside the
// netns keep it alive but lose its name and route; backends kill them first.
func (s *Slot) Close(ctx context.Context) error {
	if s.closed {
		return nil
	}
	s.closed = true
	if old := s.bind.Swap(nil); old != nil {
		s.svc.log.Info("egress close", "slot", s.ns, "tenant", old.Tenant, "invocation", old.Invocation)
	}
	err := s.svc.destroySlot(s.idx)
	s.svc.freeSlot(s)
	return err
}

func slotHandle(path string) (*netlink.Handle, func(), error) {
	ns, err := vnetns.GetFromPath(path)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", path, err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		return nil, nil, fmt.Errorf("netlink in %s: %w", path, err)
	}
	return h, func() { h.Close(); ns.Close() }, nil
}
