package egress_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/egress/egresstest"
	"github.com/wovyr/wovyr/egress/netns"
	"github.com/wovyr/wovyr/netpolicy"
)

func p50(d []time.Duration) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds()) / 1000
}

func p99(d []time.Duration) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)*99/100].Microseconds()) / 1000
}

// BenchmarkSlot measures a cold network slot: netns + veth + addresses +
// host-side nft table (setup), and its removal (teardown).
func BenchmarkSlot(b *testing.B) {
	e := newEnv(b, "bs")
	ctx := context.Background()
	var setup, teardown []time.Duration
	for b.Loop() {
		t0 := time.Now()
		s, err := e.svc.NewSlot(ctx)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := s.Close(ctx); err != nil {
			b.Fatal(err)
		}
		setup, teardown = append(setup, t1.Sub(t0)), append(teardown, time.Since(t1))
	}
	b.ReportMetric(p50(setup), "setup-p50-ms")
	b.ReportMetric(p99(setup), "setup-p99-ms")
	b.ReportMetric(p50(teardown), "teardown-p50-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkClaim measures claim time on a pre-created, released slot
// (verify the netns is clean, fill the allow chain, bind the tenant), and
// separately the release that wipes it after use (empty the chain, restore
// the netns, drop the tenant's conntrack entries).
func BenchmarkClaim(b *testing.B) {
	e := newEnv(b, "bc")
	ctx := context.Background()
	s, err := e.svc.NewSlot(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(ctx)
	var d, rel []time.Duration
	i := 0
	for b.Loop() {
		i++
		t0 := time.Now()
		if err := s.Apply(ctx, egress.Binding{Tenant: fmt.Sprintf("t%d", i%2), Invocation: fmt.Sprint(i), Policy: egresstest.TenantPolicy}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := s.Release(ctx); err != nil {
			b.Fatal(err)
		}
		d, rel = append(d, t1.Sub(t0)), append(rel, time.Since(t1))
	}
	b.ReportMetric(p50(d), "claim-p50-ms")
	b.ReportMetric(p99(d), "claim-p99-ms")
	b.ReportMetric(p50(rel), "release-p50-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkProxyHTTPS1MB downloads 1 MiB over a fresh HTTPS connection from
// inside a slot, alternating in one run between a slot whose policy allows
// the server's CIDR (forwarded directly) and one whose policy allows its
// name (DNAT to the SNI-checking proxy), and reports the ratio of medians.
func BenchmarkProxyHTTPS1MB(b *testing.B) {
	e := newEnv(b, "bp")
	ctx := context.Background()
	direct, err := e.svc.NewSlot(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close(ctx)
	proxied, err := e.svc.NewSlot(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer proxied.Close(ctx)
	if err := direct.Apply(ctx, egress.Binding{Tenant: "d", Invocation: "direct", Policy: netpolicy.Policy{Allow: []netpolicy.Rule{{CIDR: "10.213.200.1/32", Ports: []uint16{443}}}}}); err != nil {
		b.Fatal(err)
	}
	if err := proxied.Apply(ctx, egress.Binding{Tenant: "p", Invocation: "proxied", Policy: netpolicy.Policy{Allow: []netpolicy.Rule{{Host: "allowed.test", Ports: []uint16{443}}}}}); err != nil {
		b.Fatal(err)
	}
	if err := resolveIn(proxied, "allowed.test"); err != nil {
		b.Fatal(err)
	}
	var dd, pd []time.Duration
	for b.Loop() {
		for _, c := range []struct {
			s *egress.Slot
			d *[]time.Duration
		}{{direct, &dd}, {proxied, &pd}} {
			t0 := time.Now()
			if err := download(e.rig, c.s); err != nil {
				b.Fatal(err)
			}
			*c.d = append(*c.d, time.Since(t0))
		}
	}
	b.ReportMetric(p50(dd), "direct-p50-ms")
	b.ReportMetric(p50(pd), "proxied-p50-ms")
	if p50(dd) > 0 {
		b.ReportMetric(p50(pd)/p50(dd), "proxy/direct")
	}
	b.ReportMetric(0, "ns/op")
}

// resolveIn asks the stub from inside the slot, so the proxy pins the answer.
func resolveIn(s *egress.Slot, name string) error {
	var c net.Conn
	if err := netns.Do(s.NetnsPath(), func() (err error) {
		c, err = net.Dial("udp4", s.Gateway().String()+":53")
		return err
	}); err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	dc := &dns.Conn{Conn: c}
	if err := dc.WriteMsg(m); err != nil {
		return err
	}
	r, err := dc.ReadMsg()
	if err != nil {
		return err
	}
	if len(r.Answer) == 0 {
		return fmt.Errorf("%s did not resolve: %s", name, dns.RcodeToString[r.Rcode])
	}
	return nil
}

// download fetches /big over a new TLS connection opened inside the slot.
func download(rig *egresstest.Rig, s *egress.Slot) error {
	var c net.Conn
	if err := netns.Do(s.NetnsPath(), func() (err error) {
		c, err = net.DialTimeout("tcp4", egresstest.Allowed.String()+":443", 3*time.Second)
		return err
	}); err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(c, &tls.Config{ServerName: "allowed.test", RootCAs: rig.CA})
	fmt.Fprintf(tc, "GET /big HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return err
	}
	if n != egresstest.BigSize {
		return fmt.Errorf("downloaded %d bytes, want %d", n, egresstest.BigSize)
	}
	return nil
}
