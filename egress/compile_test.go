package egress

import (
	"errors"
	"net/netip"
	"os"
	"testing"

	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/sandbox"
)

func testConfig(t *testing.T) Config {
	c, err := Config{Uplinks: []string{"up0"}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCheckClasses(t *testing.T) {
	c := testConfig(t)
	for _, tc := range []struct {
		name  string
		p     netpolicy.Policy
		class sandbox.Class
		field string
	}{
		{"deny all", netpolicy.Policy{}, sandbox.OK, ""},
		{"port 0", netpolicy.Policy{Allow: []netpolicy.Rule{{Host: "a.test", Ports: []uint16{0}}}}, sandbox.BadInput, "policy.network.allow[0].ports"},
		{"bad cidr", netpolicy.Policy{Allow: []netpolicy.Rule{{Host: "a.test", Ports: []uint16{1}}, {CIDR: "nope", Ports: []uint16{1}}}}, sandbox.BadInput, "policy.network.allow[1].cidr"},
		{"ipv6", netpolicy.Policy{Allow: []netpolicy.Rule{{CIDR: "2001:db8::/32", Ports: []uint16{443}}}}, sandbox.Unenforceable, "policy.network.allow"},
	} {
		err := c.Check(tc.p)
		if sandbox.ClassOf(err) != tc.class || sandbox.FieldOf(err) != tc.field {
			t.Errorf("%s: Check = %v (class %q field %q), want class %q field %q", tc.name, err, sandbox.ClassOf(err), sandbox.FieldOf(err), tc.class, tc.field)
		}
	}
	noUplink, _ := Config{}.withDefaults()
	err := noUplink.Check(netpolicy.Policy{Allow: []netpolicy.Rule{{CIDR: "10.0.0.0/8", Ports: []uint16{1}}}})
	if !errors.Is(err, sandbox.Unenforceable) {
		t.Errorf("CIDR rule without an uplink: %v, want Unenforceable", err)
	}
	if err := noUplink.Check(netpolicy.Policy{Allow: []netpolicy.Rule{{Host: "a.test", Ports: []uint16{443}}}}); err != nil {
		t.Errorf("names need no uplink: %v", err)
	}
}

func TestCompileCutsGuardedAndReserved(t *testing.T) {
	c := testConfig(t)
	c.Reserved = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	rules, err := c.compile(netpolicy.Policy{Allow: []netpolicy.Rule{{CIDR: "0.0.0.0/0", Ports: []uint16{443}}}})
	if err != nil {
		t.Fatal(err)
	}
	for ip, want := range map[string]bool{
		"8.8.4.4": true, "10.1.2.3": true, "10.212.255.255": true, "100.100.100.199": true, "100.100.100.201": true,
		"169.254.169.254": false, "169.254.0.1": false, "127.0.0.1": false, "0.1.2.3": false, "224.0.0.1": false,
		"255.255.255.255": false, "100.100.100.200": false, "10.213.0.2": false, "10.213.127.255": false, "192.0.2.9": false,
	} {
		if got := ipAllowed(rules, netip.MustParseAddr(ip), 6, 443); got != want {
			t.Errorf("0.0.0.0/0 allows %s: %v, want %v", ip, got, want)
		}
	}
	if ipAllowed(rules, netip.MustParseAddr("8.8.4.4"), 6, 80) || ipAllowed(rules, netip.MustParseAddr("8.8.4.4"), 17, 443) {
		t.Error("port and protocol must match")
	}
	named, _ := c.compile(netpolicy.Policy{Allow: []netpolicy.Rule{{CIDR: "169.254.169.254/32", Ports: []uint16{80}}}})
	if !ipAllowed(named, netip.MustParseAddr("169.254.169.254"), 6, 80) {
		t.Error("a rule naming the metadata address explicitly must allow it")
	}
	slot, _ := c.compile(netpolicy.Policy{Allow: []netpolicy.Rule{{CIDR: "10.213.0.0/30", Ports: []uint16{80}}}})
	if len(slot) != 0 {
		t.Errorf("the slot range is never reachable, even named: %+v", slot)
	}
}

func TestIsIPLiteral(t *testing.T) {
	for h, want := range map[string]bool{
		"2130706433": true, "0x7f.1": true, "127.1": true, "0177.0.0.1": true, "10.213.200.1": true, "[::1]": true,
		"::ffff:127.0.0.1": true, "0x7f000001": true, "allowed.test": false, "a1.test": false, "1a.test": false,
	} {
		if got := isIPLiteral(h); got != want {
			t.Errorf("isIPLiteral(%q) = %v, want %v", h, got, want)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	c, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	gw, sb := c.slotAddrs(3)
	if gw.String() != "10.213.0.13" || sb.String() != "10.213.0.14" || c.slots() != 8192 {
		t.Errorf("slot 3 = %s/%s of %d", gw, sb, c.slots())
	}
	if c.netnsName(3) != "wovyr-e-s3" || c.tableName(3) != "wovyr_e_s3" || c.vethName(8191) != "wve8191" {
		t.Errorf("names: %s %s %s", c.netnsName(3), c.tableName(3), c.vethName(8191))
	}
	for _, bad := range []Config{{Tag: "TooLong"}, {Tag: "e1"}, {SlotRange: netip.MustParsePrefix("10.0.0.0/30")}, {SlotRange: netip.MustParsePrefix("fd00::/64")}} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestResolvConfServers(t *testing.T) {
	p := t.TempDir() + "/resolv.conf"
	if err := os.WriteFile(p, []byte("# c\nsearch x\nnameserver 192.0.2.53\nnameserver 2001:db8::1\nnameserver bogus\nnameserver 198.51.100.7 # tail\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ResolvConfServers(p)
	if err != nil || len(got) != 2 || got[0].String() != "192.0.2.53:53" || got[1].String() != "198.51.100.7:53" {
		t.Fatalf("got %v %v", got, err)
	}
	if err := os.WriteFile(p, []byte("nameserver ::1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ResolvConfServers(p); err == nil {
		t.Error("a resolv.conf without IPv4 servers must be an error")
	}
}
