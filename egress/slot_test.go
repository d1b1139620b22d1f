package egress_test

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/egress/egresstest"
	"github.com/wovyr/wovyr/egress/netns"
	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/sandbox"
)

// allowRules counts the rules in a slot's host-side allow chain, read back
// from the kernel.
func allowRules(t *testing.T, e *env, s *egress.Slot) int {
	t.Helper()
	ns, err := vnetns.GetFromPath(e.rig.HostNetns)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	cc, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := cc.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		if tb.Name == "wovyr_"+e.cfg.Tag+"_s"+s.NetnsPath()[len("/run/netns/wovyr-"+e.cfg.Tag+"-s"):] {
			rules, err := cc.GetRules(tb, &nftables.Chain{Name: "allow", Table: tb})
			if err != nil {
				t.Fatal(err)
			}
			return len(rules)
		}
	}
	t.Fatalf("no table for %s", s.NetnsPath())
	return 0
}

// TestClaimWipesTenantState tampers with a slot as root inside it, then
// claims it for another tenant and inspects the real kernel state.
func TestClaimWipesTenantState(t *testing.T) {
	e := newEnv(t, "tw")
	ctx := context.Background()
	s := e.slot(t)
	if n := allowRules(t, e, s); n != 0 {
		t.Fatalf("a fresh slot has %d allow rules, want 0", n)
	}
	if err := s.Apply(ctx, egress.Binding{Tenant: "a", Invocation: "a1", Policy: egresstest.TenantPolicy}); err != nil {
		t.Fatal(err)
	}
	if n := allowRules(t, e, s); n < 3 {
		t.Fatalf("tenant policy gave %d allow rules", n)
	}
	pre := []egresstest.Row{
		{C: egresstest.Check{ID: "resolve", Kind: "dns", Addr: s.Gateway().String() + ":53", Host: "allowed.test"}, Want: true},
		{C: egresstest.Check{ID: "http", Kind: "http", Addr: "10.213.200.1:80", Host: "allowed.test", Phase: 1}, Want: true},
	}
	egresstest.AssertTable(t, pre, e.probe(t, s, egresstest.ProbeSpec{Checks: egresstest.Checks(pre)}), 0)

	// Tenant A, as root inside its netns, leaves things behind.
	if err := netns.Do(s.NetnsPath(), func() error {
		eth, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		a, _ := netlink.ParseAddr("10.213.0.99/32")
		if err := netlink.AddrAdd(eth, a); err != nil {
			return err
		}
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "junk0"}, PeerName: "junk1"}); err != nil {
			return err
		}
		_, dst, _ := net.ParseCIDR("10.213.200.0/24")
		if err := netlink.RouteAdd(&netlink.Route{Dst: dst, LinkIndex: eth.Attrs().Index, Scope: netlink.SCOPE_LINK}); err != nil {
			return err
		}
		cc, err := nftables.New()
		if err != nil {
			return err
		}
		cc.AddTable(&nftables.Table{Name: "tenant_a", Family: nftables.TableFamilyIPv4})
		return cc.Flush()
	}); err != nil {
		t.Fatal(err)
	}

	// Tenant B claims the slot with the same policy.
	if err := s.Apply(ctx, egress.Binding{Tenant: "b", Invocation: "b1", Policy: egresstest.TenantPolicy}); err != nil {
		t.Fatal(err)
	}
	h, err := netlink.NewHandleAt(mustNS(t, s.NetnsPath()))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	links, _ := h.LinkList()
	var names []string
	for _, l := range links {
		names = append(names, l.Attrs().Name)
	}
	if len(names) != 2 {
		t.Errorf("links after claim: %v, want [lo eth0]", names)
	}
	eth, _ := h.LinkByName("eth0")
	addrs, _ := h.AddrList(eth, unix.AF_INET)
	if len(addrs) != 1 || !addrs[0].IP.Equal(net.IP(s.Addr().AsSlice())) {
		t.Errorf("eth0 addresses after claim: %v, want only %s", addrs, s.Addr())
	}
	routes, _ := h.RouteList(nil, unix.AF_INET)
	for _, r := range routes {
		if r.Dst != nil && r.Dst.String() == "10.213.200.0/24" {
			t.Errorf("tenant A's route survived: %v", r)
		}
	}
	var tables []*nftables.Table
	if err := netns.Do(s.NetnsPath(), func() error {
		cc, err := nftables.New()
		if err != nil {
			return err
		}
		tables, err = cc.ListTables()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(tables) != 0 {
		t.Errorf("in-slot nft tables after claim: %d", len(tables))
	}
	// What the stub resolved for A is not pinned for B: B must resolve itself.
	post := []egresstest.Row{
		{C: egresstest.Check{ID: "http-unresolved", Kind: "http", Addr: "10.213.200.1:80", Host: "allowed.test"}, Want: false},
		{C: egresstest.Check{ID: "resolve", Kind: "dns", Addr: s.Gateway().String() + ":53", Host: "allowed.test", Phase: 1}, Want: true},
		{C: egresstest.Check{ID: "http-resolved", Kind: "http", Addr: "10.213.200.1:80", Host: "allowed.test", Phase: 2}, Want: true},
	}
	egresstest.AssertTable(t, post, e.probe(t, s, egresstest.ProbeSpec{Checks: egresstest.Checks(post)}), 0)

	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := allowRules(t, e, s); n != 0 {
		t.Errorf("released slot keeps %d allow rules", n)
	}
}

func mustNS(t *testing.T, p string) vnetns.NsHandle {
	t.Helper()
	ns, err := vnetns.GetFromPath(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// TestApplyRejectsAndStaysDenyAll: a bad or unenforceable policy is a typed
// error and leaves the slot allowing nothing.
func TestApplyRejectsAndStaysDenyAll(t *testing.T) {
	e := newEnv(t, "tr")
	ctx := context.Background()
	s := e.slot(t)
	if err := s.Apply(ctx, egress.Binding{Tenant: "a", Invocation: "a1", Policy: egresstest.TenantPolicy}); err != nil {
		t.Fatal(err)
	}
	bad := netpolicy.Policy{Allow: []netpolicy.Rule{{CIDR: "10.213.200.0/24", Ports: []uint16{0}}}}
	if err := s.Apply(ctx, egress.Binding{Tenant: "b", Invocation: "b1", Policy: bad}); !errors.Is(err, sandbox.BadInput) || sandbox.FieldOf(err) != "policy.network.allow[0].ports" {
		t.Fatalf("port 0: %v", err)
	}
	v6 := netpolicy.Policy{Allow: []netpolicy.Rule{{CIDR: "fd00::/8", Ports: []uint16{443}}}}
	if err := s.Apply(ctx, egress.Binding{Tenant: "b", Invocation: "b1", Policy: v6}); !errors.Is(err, sandbox.Unenforceable) {
		t.Fatalf("ipv6: %v", err)
	}
	if err := s.Apply(ctx, egress.Binding{Tenant: "Not A Tenant", Policy: egresstest.TenantPolicy}); !errors.Is(err, sandbox.BadInput) {
		t.Fatalf("tenant: %v", err)
	}
	// Apply validates before touching the slot, so tenant A's binding is
	// still the one in force; Release is what drops it.
	if n := allowRules(t, e, s); n == 0 {
		t.Error("a rejected Apply must not disturb the current binding")
	}
}

// TestReconcileRemovesLeftovers simulates a crash (slots never closed) and
// checks Reconcile finds and removes exactly them.
func TestReconcileRemovesLeftovers(t *testing.T) {
	e := newEnv(t, "tc")
	ctx := context.Background()
	for range 3 {
		if _, err := e.svc.NewSlot(ctx); err != nil {
			t.Fatal(err)
		}
	}
	left, err := egress.Find(ctx, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Netns) != 3 || len(left.Tables) != 3 || len(left.Links) != 3 {
		t.Fatalf("before reconcile: %+v", left)
	}
	if err := egress.Reconcile(ctx, e.cfg, nil); err != nil {
		t.Fatal(err)
	}
	if left, _ := egress.Find(ctx, e.cfg); !left.Empty() {
		t.Fatalf("after reconcile: %+v", left)
	}
	// Another tag's things are not touched: the rig's uplink is still there.
	h, err := netlink.NewHandleAt(mustNS(t, e.rig.HostNetns))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.LinkByName(e.rig.Uplink); err != nil {
		t.Errorf("reconcile removed the rig's uplink: %v", err)
	}
}
