package egress_test

import (
	"context"
	"testing"

	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/egress/egresstest"
	"github.com/wovyr/wovyr/netpolicy"
)

func TestSmoke(t *testing.T) {
	e := newEnv(t, "t0")
	s := e.slot(t)
	err := s.Apply(context.Background(), egress.Binding{Tenant: "a", Invocation: "inv-1", Policy: netpolicy.Policy{Allow: []netpolicy.Rule{
		{CIDR: "10.213.200.1/32", Ports: []uint16{7001}},
		{Host: "allowed.test", Ports: []uint16{80, 443}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	rows := []egresstest.Row{
		{C: egresstest.Check{ID: "tcp-allowed", Kind: "tcp", Addr: "10.213.200.1:7001"}, Want: true},
		{C: egresstest.Check{ID: "tcp-denied", Kind: "tcp", Addr: "10.213.200.2:7001"}, Want: false},
		{C: egresstest.Check{ID: "dns", Kind: "dns", Addr: s.Gateway().String() + ":53", Host: "allowed.test"}, Want: true},
		{C: egresstest.Check{ID: "http", Kind: "http", Addr: "10.213.200.1:80", Host: "allowed.test"}, Want: true},
		{C: egresstest.Check{ID: "tls", Kind: "tls", Addr: "10.213.200.1:443", SNI: "allowed.test"}, Want: true},
	}
	rep := e.probe(t, s, egresstest.ProbeSpec{Checks: egresstest.Checks(rows)})
	for _, o := range rep.Outcomes {
		t.Logf("%s %v %s", o.ID, o.OK, o.Detail)
	}
	egresstest.AssertTable(t, rows, rep, 0)
	t.Log(e.logs.String())
}
