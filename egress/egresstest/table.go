package egresstest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/sandbox"
)

// Row is one line of a truth table: a check and whether it must succeed.
type Row struct {
	C    Check
	Want bool
}

// phase orders the truth table: independent checks first (phase 0), then
// those that need a name resolved in phase 0, then the rebinding cycle one
// query at a time, then what changes the slot (spoofing) and a final check.
func phase(c Check) int {
	switch {
	case c.ID == "73-rebind-1":
		return 2
	case c.ID == "73-rebind-2":
		return 3
	case c.ID == "73-rebind-3-metadata":
		return 4
	case strings.HasPrefix(c.ID, "73-"):
		return 5
	case c.Kind == "spoof":
		return 6
	case c.ID == "70-tcp-allowed-after":
		return 7
	case c.Kind == "http" || c.Kind == "tls" || c.Kind == "proxy" || c.Kind == "connect" || c.Kind == "fetch":
		return 1
	}
	return 0
}

// Checks returns the rows' checks, in order.
func Checks(rows []Row) []Check {
	var cs []Check
	for _, r := range rows {
		cs = append(cs, r.C)
	}
	return cs
}

// ChildRows drops the rows whose outcome depends on running once, in order
// (the rebinding cycle, spoofing), for the re-executed child's run.
func ChildRows(rows []Row) []Row {
	var out []Row
	for _, r := range rows {
		if !strings.HasPrefix(r.C.ID, "73-rebind-") && r.C.Kind != "spoof" {
			out = append(out, r)
		}
	}
	return out
}

// AssertTable compares a report with the table.
func AssertTable(t testing.TB, rows []Row, rep Report, depth int) {
	t.Helper()
	if len(rep.Outcomes) != len(rows) {
		t.Fatalf("depth %d: %d outcomes for %d checks", depth, len(rep.Outcomes), len(rows))
	}
	for i, r := range rows {
		o := rep.Outcomes[i]
		if o.ID != r.C.ID {
			t.Fatalf("depth %d: outcome %d is %q, want %q", depth, i, o.ID, r.C.ID)
		}
		if o.OK != r.Want {
			t.Errorf("depth %d: %-28s ok=%v, want %v (%s)", depth, r.C.ID, o.OK, r.Want, strings.TrimSpace(o.Detail))
		}
	}
}

// Canary is the secret the DNS exfiltration checks try to leak.
const Canary = "c4n4ry-7f3a9"

// TenantPolicy is the policy of the truth table: two names, a wildcard,
// a rebinding name, one CIDR:port (tcp and udp) and a wide CIDR on one port.
var TenantPolicy = netpolicy.Policy{Allow: []netpolicy.Rule{
	{Host: "allowed.test", Ports: []uint16{80, 443}},
	{Host: "*.wild.test", Ports: []uint16{443}},
	{Host: "rebind.test", Ports: []uint16{80}},
	{Host: "host.test", Ports: []uint16{9000}}, // resolves to the host's own address
	{CIDR: "10.213.200.1/32", Ports: []uint16{7001}},
	{CIDR: "10.213.200.1/32", Ports: []uint16{7003}, Protocol: "udp"},
	{CIDR: "0.0.0.0/0", Ports: []uint16{9000}},
}}

// OpenPolicy is the positive controls' allowlist: everything the truth
// table probes (every port the rows use, metadata named explicitly, every
// name the rig serves), so a sandbox bound to it must fail every denial.
func OpenPolicy() netpolicy.Policy {
	tcp := []uint16{22, 53, 80, 443, 853, 3129, 7001, 7002, 9000}
	names := []uint16{80, 443, 9000}
	p := netpolicy.Policy{Allow: []netpolicy.Rule{
		{CIDR: "0.0.0.0/0", Ports: tcp},
		{CIDR: "0.0.0.0/0", Ports: []uint16{53, 7003}, Protocol: "udp"}, // udp/443 is never valid
		{CIDR: "169.254.169.254/32", Ports: tcp},
		{CIDR: "100.100.100.200/32", Ports: tcp},
	}}
	for _, h := range []string{"allowed.test", "other.test", "front.test", "meta.test", "host.test", "rebind.test",
		"wild.test", "*.wild.test", "evilwild.test", "*.evil.test", "xn--wild-9oa.test", "*.exfil.test"} {
		p.Allow = append(p.Allow, netpolicy.Rule{Host: h, Ports: names})
	}
	return p
}

// TruthTable is BATTERY 70–84 as rows; gw is the slot's gateway, peer the
// address of another tenant's slot.
func TruthTable(gw, peer string) []Row {
	dnsAt := gw + ":53"
	proxy := gw + ":3128"
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + Canary
	rows := []Row{
		// 70 TCP allow/deny
		{Check{ID: "70-tcp-allowed", Kind: "tcp", Addr: "10.213.200.1:7001"}, true},
		{Check{ID: "70-tcp-port-denied", Kind: "tcp", Addr: "10.213.200.1:7002"}, false},
		{Check{ID: "70-tcp-ip-denied", Kind: "tcp", Addr: "10.213.200.2:7001"}, false},
		{Check{ID: "70-wide-cidr", Kind: "tcp", Addr: "10.213.200.2:9000"}, true},
		// 71 other protocols
		{Check{ID: "71-udp-allowed", Kind: "udp", Addr: "10.213.200.1:7003"}, true},
		{Check{ID: "71-udp-denied", Kind: "udp", Addr: "10.213.200.2:7003"}, false},
		{Check{ID: "71-quic-udp443", Kind: "udp", Addr: "10.213.200.1:443"}, false},
		{Check{ID: "71-ipv6", Kind: "tcp6", Addr: "[fd00:ec2::254]:80"}, false},
		{Check{ID: "71-icmp-allowed-ip", Kind: "icmp", Addr: "10.213.200.1"}, false},
		// 76 DNS exfiltration (before anything resolves: A, TXT, long labels, TCP, "rogue" resolver)
		{Check{ID: "76-Canary-a", Kind: "dns", Addr: dnsAt, Host: Canary + ".exfil.test"}, false},
		{Check{ID: "76-Canary-txt", Kind: "dns", Addr: dnsAt, Host: Canary + ".exfil.test", QType: "TXT"}, false},
		{Check{ID: "76-Canary-long", Kind: "dns", Addr: dnsAt, Host: long + ".exfil.test"}, false},
		{Check{ID: "76-Canary-tcp", Kind: "dns", Addr: dnsAt, Host: Canary + ".exfil.test", Net: "tcp"}, false},
		{Check{ID: "77-rogue-resolver", Kind: "dns", Addr: "10.213.200.53:53", Host: Canary + ".rogue.test"}, false},
		{Check{ID: "77-rogue-unrouted", Kind: "dns", Addr: "10.213.201.9:53", Host: Canary + ".rogue2.test"}, false},
		{Check{ID: "77-dot-853", Kind: "tcp", Addr: "10.213.200.53:853"}, false},
		{Check{ID: "77-rogue-answers-allowed", Kind: "dns", Addr: "10.213.200.53:53", Host: "allowed.test"}, true}, // answered by the stub
		// names: resolve through the stub
		{Check{ID: "dns-allowed", Kind: "dns", Addr: dnsAt, Host: "allowed.test"}, true},
		{Check{ID: "dns-denied-name", Kind: "dns", Addr: dnsAt, Host: "other.test"}, false},
		{Check{ID: "dns-aaaa-empty", Kind: "dns", Addr: dnsAt, Host: "allowed.test", QType: "AAAA"}, false},
		{Check{ID: "dns-meta-name", Kind: "dns", Addr: dnsAt, Host: "meta.test"}, false},
		// 80 wildcards
		{Check{ID: "80-wild-sub", Kind: "dns", Addr: dnsAt, Host: "x.wild.test"}, true},
		{Check{ID: "80-wild-upper", Kind: "dns", Addr: dnsAt, Host: "Y.WILD.TEST"}, true},
		{Check{ID: "80-wild-apex", Kind: "dns", Addr: dnsAt, Host: "wild.test"}, false},
		{Check{ID: "80-wild-suffix-trick", Kind: "dns", Addr: dnsAt, Host: "evilwild.test"}, false},
		{Check{ID: "80-wild-embedded", Kind: "dns", Addr: dnsAt, Host: "x.wild.test.evil.test"}, false},
		{Check{ID: "80-wild-punycode", Kind: "dns", Addr: dnsAt, Host: "xn--wild-9oa.test"}, false},
		// transparent HTTP (Host) and TLS (SNI), pinned to the stub's answers
		{Check{ID: "http-allowed", Kind: "http", Addr: "10.213.200.1:80", Host: "allowed.test"}, true},
		{Check{ID: "79-http-host-ip-not-pinned", Kind: "http", Addr: "10.213.200.2:80", Host: "allowed.test"}, false},
		{Check{ID: "79-http-host-denied", Kind: "http", Addr: "10.213.200.1:80", Host: "other.test"}, false},
		{Check{ID: "79-http-host-port-mismatch", Kind: "http", Addr: "10.213.200.1:80", Host: "allowed.test:443"}, false},
		{Check{ID: "72-host-decimal", Kind: "http", Addr: "10.213.200.1:80", Host: "2130706433"}, false},
		{Check{ID: "72-host-hex", Kind: "http", Addr: "10.213.200.1:80", Host: "0x7f.1"}, false},
		{Check{ID: "72-host-short", Kind: "http", Addr: "10.213.200.1:80", Host: "127.1"}, false},
		{Check{ID: "72-host-ip", Kind: "http", Addr: "10.213.200.1:80", Host: "10.213.200.1"}, false},
		{Check{ID: "72-host-mapped", Kind: "http", Addr: "10.213.200.1:80", Host: "[::ffff:10.213.200.1]"}, false},
		{Check{ID: "tls-allowed", Kind: "tls", Addr: "10.213.200.1:443", SNI: "allowed.test"}, true},
		{Check{ID: "tls-wild", Kind: "tls", Addr: "10.213.200.1:443", SNI: "x.wild.test"}, true},
		{Check{ID: "79-sni-allowed-ip-not", Kind: "tls", Addr: "10.213.200.2:443", SNI: "allowed.test"}, false},
		{Check{ID: "79-sni-denied", Kind: "tls", Addr: "10.213.200.1:443", SNI: "other.test"}, false},
		{Check{ID: "79-sni-unresolved-wild", Kind: "tls", Addr: "10.213.200.1:443", SNI: "z.wild.test"}, false},
		{Check{ID: "79-no-sni", Kind: "tls", Addr: "10.213.200.1:443"}, false},
		// explicit proxy
		{Check{ID: "proxy-allowed", Kind: "proxy", Proxy: proxy, Host: "allowed.test"}, true},
		{Check{ID: "79-proxy-denied", Kind: "proxy", Proxy: proxy, Host: "other.test"}, false},
		{Check{ID: "72-proxy-decimal", Kind: "proxy", Proxy: proxy, Host: "2130706433"}, false},
		{Check{ID: "72-proxy-hex", Kind: "proxy", Proxy: proxy, Host: "0x7f.1"}, false},
		{Check{ID: "connect-allowed", Kind: "connect", Proxy: proxy, Host: "allowed.test:443", SNI: "allowed.test"}, true},
		{Check{ID: "79-connect-fronting", Kind: "connect", Proxy: proxy, Host: "allowed.test:443", SNI: "other.test"}, false},
		{Check{ID: "79-connect-denied", Kind: "connect", Proxy: proxy, Host: "other.test:443", SNI: "other.test"}, false},
		{Check{ID: "connect-cidr-literal", Kind: "connect", Proxy: proxy, Host: "10.213.200.1:7001"}, true},
		{Check{ID: "72-connect-literal-denied", Kind: "connect", Proxy: proxy, Host: "10.213.200.2:7001"}, false},
		{Check{ID: "72-connect-decimal", Kind: "connect", Proxy: proxy, Host: "2130706433:443", SNI: "allowed.test"}, false},
		{Check{ID: "74-connect-metadata", Kind: "connect", Proxy: proxy, Host: "169.254.169.254:80"}, false},
		// 73 rebinding: .1, then .2, then the metadata address (refused by the stub)
		{Check{ID: "73-rebind-1", Kind: "dns", Addr: dnsAt, Host: "rebind.test"}, true},
		{Check{ID: "73-rebind-2", Kind: "dns", Addr: dnsAt, Host: "rebind.test"}, true},
		{Check{ID: "73-rebind-3-metadata", Kind: "dns", Addr: dnsAt, Host: "rebind.test"}, false},
		{Check{ID: "73-rebind-pinned", Kind: "http", Addr: "10.213.200.1:80", Host: "rebind.test"}, true},
		{Check{ID: "73-rebind-to-metadata", Kind: "http", Addr: "169.254.169.254:80", Host: "rebind.test"}, false},
		// 74 metadata and 75 infrastructure
		{Check{ID: "74-metadata-http", Kind: "http", Addr: "169.254.169.254:80", Host: "169.254.169.254"}, false},
		{Check{ID: "74-metadata-allowed-host", Kind: "http", Addr: "169.254.169.254:80", Host: "allowed.test"}, false},
		{Check{ID: "74-metadata-wide-cidr", Kind: "tcp", Addr: "169.254.169.254:9000"}, false},
		{Check{ID: "74-alibaba-wide-cidr", Kind: "tcp", Addr: "100.100.100.200:9000"}, false},
		{Check{ID: "74-metadata-v6", Kind: "tcp6", Addr: "[fd00:ec2::254]:80"}, false},
		{Check{ID: "75-gateway-service", Kind: "tcp", Addr: gw + ":9000"}, false},
		{Check{ID: "75-host-address", Kind: "tcp", Addr: "10.213.250.1:9000"}, false},
		{Check{ID: "75-host-loopback-via-gw", Kind: "tcp", Addr: gw + ":22"}, false},
		{Check{ID: "75-other-tenant", Kind: "tcp", Addr: peer + ":9000"}, false},
		{Check{ID: "75-proxy-admin", Kind: "tcp", Addr: gw + ":3129"}, false},
		{Check{ID: "75-connect-host-literal", Kind: "connect", Proxy: proxy, Host: "10.213.250.1:9000"}, false},
		{Check{ID: "75-connect-gateway-literal", Kind: "connect", Proxy: proxy, Host: gw + ":9000"}, false},
		{Check{ID: "75-connect-peer-literal", Kind: "connect", Proxy: proxy, Host: peer + ":9000"}, false},
		{Check{ID: "75-name-to-host-dns", Kind: "dns", Addr: dnsAt, Host: "host.test"}, false},
		{Check{ID: "75-name-to-host-connect", Kind: "connect", Proxy: proxy, Host: "host.test:9000"}, false},
		// 81 redirects: each hop re-checked
		{Check{ID: "81-redirect-allowed", Kind: "fetch", Host: "http://allowed.test/redirect?to=http://allowed.test/"}, true},
		{Check{ID: "81-redirect-denied", Kind: "fetch", Host: "http://allowed.test/redirect?to=http://other.test/"}, false},
		{Check{ID: "81-redirect-ip", Kind: "fetch", Host: "http://allowed.test/redirect?to=http://10.213.200.2/"}, false},
		// 83 tampering: no CAP_NET_ADMIN; and root-in-netns spoofing has no effect
		{Check{ID: "83-tamper-nocap", Kind: "tamper-nocap"}, false},
		{Check{ID: "83-spoof-source", Kind: "spoof", Addr: "10.213.200.1:7001", From: "10.213.0.99"}, false},
		{Check{ID: "70-tcp-allowed-after", Kind: "tcp", Addr: "10.213.200.1:7001"}, true},
	}
	for i := range rows {
		rows[i].C.Phase = phase(rows[i].C)
	}
	return rows
}

// SandboxTable is TruthTable plus the workload tampering with its own
// capabilities (adding an address to eth0), for backends whose workload
// runs on the host's kernel in its slot (container, native): it holds
// none over the slot's namespace, so the change fails.
func SandboxTable(gw, peer string) []Row {
	return append(TruthTable(gw, peer), Row{C: Check{ID: "83-tamper-own-caps", Kind: "tamper", Phase: 6}, Want: false})
}

// TableSpec is the probe spec that runs rows, then ChildRows(rows) in a
// re-executed child; gw is the slot's gateway (the resolver fetch uses).
func TableSpec(rows []Row, ca []byte, gw string) ProbeSpec {
	spec := ProbeSpec{Checks: Checks(rows), CA: ca, DNS: gw + ":53"}
	child := spec
	child.Checks = Checks(ChildRows(rows))
	spec.Child = &child
	return spec
}

// TableInvocation runs the static probe (shipped as a workload file and
// started as argv0, where the sandbox puts its workspace) on rows, as a
// trusted job under TenantPolicy: what the backends' egress battery rows
// run in a slot whose gateway is gw.
func TableInvocation(id, img, argv0 string, rows []Row, ca []byte, gw string, probe []byte) (*sandbox.Invocation, error) {
	js, err := json.Marshal(TableSpec(rows, ca, gw))
	if err != nil {
		return nil, err
	}
	return &sandbox.Invocation{
		ID: id, Tenant: "wovyr-battery",
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Image: img, Argv: []string{argv0},
			Env:   []string{ProbeEnv + "=" + string(js)},
			Files: []sandbox.File{{Path: "egressprobe", Data: probe, Mode: 0o755}}},
		Limits: sandbox.Limits{Wall: 2 * time.Minute, Pids: 512, Disk: 64 << 20},
		Policy: sandbox.Policy{Trust: sandbox.Trusted, Network: TenantPolicy},
	}, nil
}

// ParseReport checks that a probe invocation ended normally and decodes
// its report.
func ParseReport(res *sandbox.Result) (Report, error) {
	var rep Report
	if res.Class != sandbox.OK || res.ExitCode != 0 {
		return rep, fmt.Errorf("probe: class %q exit %d %s: %.400s", res.Class, res.ExitCode, res.Error, res.Stderr)
	}
	if err := json.Unmarshal(res.Stdout, &rep); err != nil {
		return rep, fmt.Errorf("probe report: %w: %.300s %.300s", err, res.Stdout, res.Stderr)
	}
	return rep, nil
}
