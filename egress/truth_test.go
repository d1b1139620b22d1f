package egress_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/egress/netns"
	"github.com/wovyr/wovyr/netpolicy"
)

const canary = "c4n4ry-7f3a9"

// tenantPolicy is the policy of the truth table: two names, a wildcard,
// a rebinding name, one CIDR:port (tcp and udp) and a wide CIDR on one port.
var tenantPolicy = netpolicy.Policy{Allow: []netpolicy.Rule{
	{Host: "allowed.test", Ports: []uint16{80, 443}},
	{Host: "*.wild.test", Ports: []uint16{443}},
	{Host: "rebind.test", Ports: []uint16{80}},
	{CIDR: "10.213.200.1/32", Ports: []uint16{7001}},
	{CIDR: "10.213.200.1/32", Ports: []uint16{7003}, Protocol: "udp"},
	{CIDR: "0.0.0.0/0", Ports: []uint16{9000}},
}}

// truthTable is BATTERY 70–84 as rows; gw is the slot's gateway, peer the
// address of another tenant's slot.
func truthTable(gw, peer string) []row {
	dnsAt := gw + ":53"
	proxy := gw + ":3128"
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + canary
	return []row{
		// 70 TCP allow/deny
		{check{ID: "70-tcp-allowed", Kind: "tcp", Addr: "10.213.200.1:7001"}, true},
		{check{ID: "70-tcp-port-denied", Kind: "tcp", Addr: "10.213.200.1:7002"}, false},
		{check{ID: "70-tcp-ip-denied", Kind: "tcp", Addr: "10.213.200.2:7001"}, false},
		{check{ID: "70-wide-cidr", Kind: "tcp", Addr: "10.213.200.2:9000"}, true},
		// 71 other protocols
		{check{ID: "71-udp-allowed", Kind: "udp", Addr: "10.213.200.1:7003"}, true},
		{check{ID: "71-udp-denied", Kind: "udp", Addr: "10.213.200.2:7003"}, false},
		{check{ID: "71-quic-udp443", Kind: "udp", Addr: "10.213.200.1:443"}, false},
		{check{ID: "71-ipv6", Kind: "tcp6", Addr: "[fd00:ec2::254]:80"}, false},
		// 76 DNS exfiltration (before anything resolves: A, TXT, long labels, TCP, "rogue" resolver)
		{check{ID: "76-canary-a", Kind: "dns", Addr: dnsAt, Host: canary + ".exfil.test"}, false},
		{check{ID: "76-canary-txt", Kind: "dns", Addr: dnsAt, Host: canary + ".exfil.test", QType: "TXT"}, false},
		{check{ID: "76-canary-long", Kind: "dns", Addr: dnsAt, Host: long + ".exfil.test"}, false},
		{check{ID: "76-canary-tcp", Kind: "dns", Addr: dnsAt, Host: canary + ".exfil.test", Net: "tcp"}, false},
		{check{ID: "77-rogue-resolver", Kind: "dns", Addr: "10.213.200.53:53", Host: canary + ".rogue.test"}, false},
		{check{ID: "77-rogue-unrouted", Kind: "dns", Addr: "10.213.201.9:53", Host: canary + ".rogue2.test"}, false},
		{check{ID: "77-dot-853", Kind: "tcp", Addr: "10.213.200.53:853"}, false},
		{check{ID: "77-rogue-answers-allowed", Kind: "dns", Addr: "10.213.200.53:53", Host: "allowed.test"}, true}, // answered by the stub
		// names: resolve through the stub
		{check{ID: "dns-allowed", Kind: "dns", Addr: dnsAt, Host: "allowed.test"}, true},
		{check{ID: "dns-denied-name", Kind: "dns", Addr: dnsAt, Host: "other.test"}, false},
		{check{ID: "dns-aaaa-empty", Kind: "dns", Addr: dnsAt, Host: "allowed.test", QType: "AAAA"}, false},
		{check{ID: "dns-meta-name", Kind: "dns", Addr: dnsAt, Host: "meta.test"}, false},
		// 80 wildcards
		{check{ID: "80-wild-sub", Kind: "dns", Addr: dnsAt, Host: "x.wild.test"}, true},
		{check{ID: "80-wild-upper", Kind: "dns", Addr: dnsAt, Host: "Y.WILD.TEST"}, true},
		{check{ID: "80-wild-apex", Kind: "dns", Addr: dnsAt, Host: "wild.test"}, false},
		{check{ID: "80-wild-suffix-trick", Kind: "dns", Addr: dnsAt, Host: "evilwild.test"}, false},
		{check{ID: "80-wild-embedded", Kind: "dns", Addr: dnsAt, Host: "x.wild.test.evil.test"}, false},
		{check{ID: "80-wild-punycode", Kind: "dns", Addr: dnsAt, Host: "xn--wild-9oa.test"}, false},
		// transparent HTTP (Host) and TLS (SNI), pinned to the stub's answers
		{check{ID: "http-allowed", Kind: "http", Addr: "10.213.200.1:80", Host: "allowed.test"}, true},
		{check{ID: "79-http-host-ip-not-pinned", Kind: "http", Addr: "10.213.200.2:80", Host: "allowed.test"}, false},
		{check{ID: "79-http-host-denied", Kind: "http", Addr: "10.213.200.1:80", Host: "other.test"}, false},
		{check{ID: "79-http-host-port-mismatch", Kind: "http", Addr: "10.213.200.1:80", Host: "allowed.test:443"}, false},
		{check{ID: "72-host-decimal", Kind: "http", Addr: "10.213.200.1:80", Host: "2130706433"}, false},
		{check{ID: "72-host-hex", Kind: "http", Addr: "10.213.200.1:80", Host: "0x7f.1"}, false},
		{check{ID: "72-host-short", Kind: "http", Addr: "10.213.200.1:80", Host: "127.1"}, false},
		{check{ID: "72-host-ip", Kind: "http", Addr: "10.213.200.1:80", Host: "10.213.200.1"}, false},
		{check{ID: "72-host-mapped", Kind: "http", Addr: "10.213.200.1:80", Host: "[::ffff:10.213.200.1]"}, false},
		{check{ID: "tls-allowed", Kind: "tls", Addr: "10.213.200.1:443", SNI: "allowed.test"}, true},
		{check{ID: "tls-wild", Kind: "tls", Addr: "10.213.200.1:443", SNI: "x.wild.test"}, true},
		{check{ID: "79-sni-allowed-ip-not", Kind: "tls", Addr: "10.213.200.2:443", SNI: "allowed.test"}, false},
		{check{ID: "79-sni-denied", Kind: "tls", Addr: "10.213.200.1:443", SNI: "other.test"}, false},
		{check{ID: "79-sni-unresolved-wild", Kind: "tls", Addr: "10.213.200.1:443", SNI: "z.wild.test"}, false},
		{check{ID: "79-no-sni", Kind: "tls", Addr: "10.213.200.1:443"}, false},
		// explicit proxy
		{check{ID: "proxy-allowed", Kind: "proxy", Proxy: proxy, Host: "allowed.test"}, true},
		{check{ID: "79-proxy-denied", Kind: "proxy", Proxy: proxy, Host: "other.test"}, false},
		{check{ID: "72-proxy-decimal", Kind: "proxy", Proxy: proxy, Host: "2130706433"}, false},
		{check{ID: "72-proxy-hex", Kind: "proxy", Proxy: proxy, Host: "0x7f.1"}, false},
		{check{ID: "connect-allowed", Kind: "connect", Proxy: proxy, Host: "allowed.test:443", SNI: "allowed.test"}, true},
		{check{ID: "79-connect-fronting", Kind: "connect", Proxy: proxy, Host: "allowed.test:443", SNI: "other.test"}, false},
		{check{ID: "79-connect-denied", Kind: "connect", Proxy: proxy, Host: "other.test:443", SNI: "other.test"}, false},
		{check{ID: "connect-cidr-literal", Kind: "connect", Proxy: proxy, Host: "10.213.200.1:7001"}, true},
		{check{ID: "72-connect-literal-denied", Kind: "connect", Proxy: proxy, Host: "10.213.200.2:7001"}, false},
		{check{ID: "72-connect-decimal", Kind: "connect", Proxy: proxy, Host: "2130706433:443", SNI: "allowed.test"}, false},
		{check{ID: "74-connect-metadata", Kind: "connect", Proxy: proxy, Host: "169.254.169.254:80"}, false},
		// 73 rebinding: .1, then .2, then the metadata address (refused by the stub)
		{check{ID: "73-rebind-1", Kind: "dns", Addr: dnsAt, Host: "rebind.test"}, true},
		{check{ID: "73-rebind-2", Kind: "dns", Addr: dnsAt, Host: "rebind.test"}, true},
		{check{ID: "73-rebind-3-metadata", Kind: "dns", Addr: dnsAt, Host: "rebind.test"}, false},
		{check{ID: "73-rebind-pinned", Kind: "http", Addr: "10.213.200.1:80", Host: "rebind.test"}, true},
		{check{ID: "73-rebind-to-metadata", Kind: "http", Addr: "169.254.169.254:80", Host: "rebind.test"}, false},
		// 74 metadata and 75 infrastructure
		{check{ID: "74-metadata-http", Kind: "http", Addr: "169.254.169.254:80", Host: "169.254.169.254"}, false},
		{check{ID: "74-metadata-allowed-host", Kind: "http", Addr: "169.254.169.254:80", Host: "allowed.test"}, false},
		{check{ID: "74-metadata-wide-cidr", Kind: "tcp", Addr: "169.254.169.254:9000"}, false},
		{check{ID: "74-alibaba-wide-cidr", Kind: "tcp", Addr: "100.100.100.200:9000"}, false},
		{check{ID: "74-metadata-v6", Kind: "tcp6", Addr: "[fd00:ec2::254]:80"}, false},
		{check{ID: "75-gateway-service", Kind: "tcp", Addr: gw + ":9000"}, false},
		{check{ID: "75-host-address", Kind: "tcp", Addr: "10.213.250.1:9000"}, false},
		{check{ID: "75-host-loopback-via-gw", Kind: "tcp", Addr: gw + ":22"}, false},
		{check{ID: "75-other-tenant", Kind: "tcp", Addr: peer + ":9000"}, false},
		{check{ID: "75-proxy-admin", Kind: "tcp", Addr: gw + ":3129"}, false},
		// 81 redirects: each hop re-checked
		{check{ID: "81-redirect-allowed", Kind: "fetch", Host: "http://allowed.test/redirect?to=http://allowed.test/"}, true},
		{check{ID: "81-redirect-denied", Kind: "fetch", Host: "http://allowed.test/redirect?to=http://other.test/"}, false},
		{check{ID: "81-redirect-ip", Kind: "fetch", Host: "http://allowed.test/redirect?to=http://10.213.200.2/"}, false},
		// 83 tampering: no CAP_NET_ADMIN; and root-in-netns spoofing has no effect
		{check{ID: "83-tamper-nocap", Kind: "tamper-nocap"}, false},
		{check{ID: "83-spoof-source", Kind: "spoof", Addr: "10.213.200.1:7001", From: "10.213.0.99"}, false},
		{check{ID: "70-tcp-allowed-after", Kind: "tcp", Addr: "10.213.200.1:7001"}, true},
	}
}

// TestTruthTable runs the egress battery from a process inside a slot, and
// (84) again from a re-executed child of it, then checks the harness DNS
// server never saw the canary and that every denial was logged with the
// invocation id.
func TestTruthTable(t *testing.T) {
	e := newEnv(t, "t1")
	ctx := context.Background()
	a, b := e.slot(t), e.slot(t)
	if err := a.Apply(ctx, egress.Binding{Tenant: "tenant-a", Invocation: "inv-a1", Policy: tenantPolicy}); err != nil {
		t.Fatal(err)
	}
	if err := b.Apply(ctx, egress.Binding{Tenant: "tenant-b", Invocation: "inv-b1", Policy: tenantPolicy}); err != nil {
		t.Fatal(err)
	}
	// Tenant B listens on 9000 inside its own slot: A must not reach it
	// even though A's policy allows 0.0.0.0/0:9000.
	var bl net.Listener
	if err := netns.Do(b.NetnsPath(), func() (err error) {
		bl, err = net.Listen("tcp4", fmt.Sprintf("%s:9000", b.Addr()))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer bl.Close()

	rows := truthTable(a.Gateway().String(), b.Addr().String())
	// The child skips the checks whose outcome depends on order (the
	// rebinding cycle, one-shot spoofing) and runs everything else again.
	var childRows []row
	for _, r := range rows {
		if !strings.HasPrefix(r.c.ID, "73-rebind-") && r.c.Kind != "spoof" {
			childRows = append(childRows, r)
		}
	}
	rep := e.probe(t, a, probeSpec{Checks: checks(rows), Child: &probeSpec{Checks: checks(childRows), CA: e.rig.CAPEM, DNS: a.Gateway().String() + ":53"}})
	assertTable(t, rows, rep, 0)
	if rep.Child == nil {
		t.Fatalf("child report missing: %s", rep.ChildErr)
	}
	assertTable(t, childRows, *rep.Child, 1)

	qs := strings.Join(e.rig.Queries(), "\n")
	if strings.Contains(qs, canary) {
		t.Errorf("the harness DNS server saw the canary:\n%s", qs)
	}
	if !strings.Contains(qs, "allowed.test") { // positive control: the stub does go upstream
		t.Errorf("the stub never asked upstream for allowed.test:\n%s", qs)
	}
	logs := e.logs.String()
	for _, want := range []string{
		`msg="egress deny" via=tls src=` + a.Addr().String() + ` name=allowed.test dst=10.213.200.2:443 tenant=tenant-a invocation=inv-a1`,
		`msg="egress deny" via=dns src=` + a.Addr().String() + ` name=` + canary + `.exfil.test`,
		`msg="egress deny" via=connect-sni`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(logs)
	}
}

// TestPositiveControl shows the denials above are the table's doing, not a
// broken route: a policy that allows the "denied" server reaches it, and
// the same slot re-applied as deny-all reaches nothing.
func TestPositiveControl(t *testing.T) {
	e := newEnv(t, "t2")
	ctx := context.Background()
	s := e.slot(t)
	wide := netpolicy.Policy{Allow: []netpolicy.Rule{
		{CIDR: "10.213.200.0/24", Ports: []uint16{7001, 7002}},
		{CIDR: "10.213.200.0/24", Ports: []uint16{7003}, Protocol: "udp"},
		{CIDR: "169.254.169.254/32", Ports: []uint16{9000}}, // names the metadata address explicitly
	}}
	if err := s.Apply(ctx, egress.Binding{Tenant: "a", Invocation: "ctl", Policy: wide}); err != nil {
		t.Fatal(err)
	}
	rows := []row{
		{check{ID: "denied-server-7001", Kind: "tcp", Addr: "10.213.200.2:7001"}, true},
		{check{ID: "denied-server-7002", Kind: "tcp", Addr: "10.213.200.2:7002"}, true},
		{check{ID: "udp", Kind: "udp", Addr: "10.213.200.2:7003"}, true},
		{check{ID: "metadata-named", Kind: "tcp", Addr: "169.254.169.254:9000"}, true},
		{check{ID: "host-still-closed", Kind: "tcp", Addr: "10.213.250.1:9000"}, false},
	}
	assertTable(t, rows, e.probe(t, s, probeSpec{Checks: checks(rows)}), 0)

	if err := s.Apply(ctx, egress.Binding{Tenant: "b", Invocation: "ctl2"}); err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		rows[i].want = false
	}
	assertTable(t, rows, e.probe(t, s, probeSpec{Checks: checks(rows)}), 0)
}
