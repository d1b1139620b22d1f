package egress_test

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/egress/egresstest"
	"github.com/wovyr/wovyr/egress/netns"
	"github.com/wovyr/wovyr/netpolicy"
)

// TestTruthTable runs the egress battery from a process inside a slot, and
// (84) again from a re-executed child of it, then checks the harness DNS
// server never saw the egresstest.Canary and that every denial was logged with the
// invocation id.
func TestTruthTable(t *testing.T) {
	e := newEnv(t, "tt")
	ctx := context.Background()
	a, b := e.slot(t), e.slot(t)
	if err := a.Apply(ctx, egress.Binding{Tenant: "tenant-a", Invocation: "inv-a1", Policy: egresstest.TenantPolicy}); err != nil {
		t.Fatal(err)
	}
	if err := b.Apply(ctx, egress.Binding{Tenant: "tenant-b", Invocation: "inv-b1", Policy: egresstest.TenantPolicy}); err != nil {
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

	if want := "HTTP_PROXY=http://" + a.Gateway().String() + ":3128"; !slices.Contains(a.Env(), want) {
		t.Errorf("Env() = %v, want %s (the proxy the table's explicit checks use)", a.Env(), want)
	}
	if !strings.HasPrefix(string(a.ResolvConf()), "nameserver "+a.Gateway().String()+"\n") {
		t.Errorf("ResolvConf() = %q", a.ResolvConf())
	}
	rows := egresstest.TruthTable(a.Gateway().String(), b.Addr().String())
	childRows := egresstest.ChildRows(rows)
	rep := e.probe(t, a, egresstest.ProbeSpec{Checks: egresstest.Checks(rows), Child: &egresstest.ProbeSpec{Checks: egresstest.Checks(childRows), CA: e.rig.CAPEM, DNS: a.Gateway().String() + ":53"}})
	egresstest.AssertTable(t, rows, rep, 0)
	if rep.Child == nil {
		t.Fatalf("child report missing: %s", rep.ChildErr)
	}
	egresstest.AssertTable(t, childRows, *rep.Child, 1)

	qs := strings.Join(e.rig.Queries(), "\n")
	if strings.Contains(qs, egresstest.Canary) {
		t.Errorf("the harness DNS server saw the egresstest.Canary:\n%s", qs)
	}
	if !strings.Contains(qs, "allowed.test") { // positive control: the stub does go upstream
		t.Errorf("the stub never asked upstream for allowed.test:\n%s", qs)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	logs := e.logs.String()
	if !regexp.MustCompile(`msg="egress release" slot=wovyr-tt-s\d+ tenant=tenant-a invocation=inv-a1 dropped_packets=[1-9]`).MatchString(logs) {
		t.Error("release did not log the packets the table dropped for inv-a1")
	}
	for _, want := range []string{
		`msg="egress deny" via=tls src=` + a.Addr().String() + ` name=allowed.test dst=10.213.200.2:443 tenant=tenant-a invocation=inv-a1`,
		`msg="egress deny" via=dns src=` + a.Addr().String() + ` name=` + egresstest.Canary + `.exfil.test`,
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
// broken route or a probe that cannot succeed: a policy that allows the
// "denied" server reaches it, what no policy allows works from the host side
// (ICMP, the fake metadata server, the harness DNS server), and the same
// slot re-applied as deny-all reaches nothing.
func TestPositiveControl(t *testing.T) {
	e := newEnv(t, "tp")
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
	rows := []egresstest.Row{
		{C: egresstest.Check{ID: "denied-server-7001", Kind: "tcp", Addr: "10.213.200.2:7001"}, Want: true},
		{C: egresstest.Check{ID: "denied-server-7002", Kind: "tcp", Addr: "10.213.200.2:7002"}, Want: true},
		{C: egresstest.Check{ID: "udp", Kind: "udp", Addr: "10.213.200.2:7003"}, Want: true},
		{C: egresstest.Check{ID: "metadata-named", Kind: "tcp", Addr: "169.254.169.254:9000"}, Want: true},
		{C: egresstest.Check{ID: "host-still-closed", Kind: "tcp", Addr: "10.213.250.1:9000"}, Want: false},
	}
	egresstest.AssertTable(t, rows, e.probe(t, s, egresstest.ProbeSpec{Checks: egresstest.Checks(rows)}), 0)

	// Checks that no policy can allow, shown to work from outside the slots.
	outside := []egresstest.Row{
		{C: egresstest.Check{ID: "icmp-from-host", Kind: "icmp", Addr: "10.213.200.1"}, Want: true},
		{C: egresstest.Check{ID: "metadata-from-host", Kind: "http", Addr: "169.254.169.254:80", Host: "169.254.169.254"}, Want: true},
		{C: egresstest.Check{ID: "canary-reaches-harness", Kind: "dns", Addr: "10.213.200.53:53", Host: "ctl.exfil.test"}, Want: true},
	}
	egresstest.AssertTable(t, outside, e.probeIn(t, e.rig.HostNetns, egresstest.ProbeSpec{Checks: egresstest.Checks(outside)}), 0)

	if err := s.Apply(ctx, egress.Binding{Tenant: "b", Invocation: "ctl2"}); err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		rows[i].Want = false
	}
	egresstest.AssertTable(t, rows, e.probe(t, s, egresstest.ProbeSpec{Checks: egresstest.Checks(rows)}), 0)
}
