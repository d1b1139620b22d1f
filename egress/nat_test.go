package egress_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/egress/egresstest"
	"github.com/wovyr/wovyr/egress/netns"
	"github.com/wovyr/wovyr/netpolicy"
)

// dialFrom opens a TCP connection from inside the slot's netns.
func dialFrom(s *egress.Slot, addr string) (net.Conn, error) {
	var c net.Conn
	err := netns.Do(s.NetnsPath(), func() (err error) {
		c, err = net.DialTimeout("tcp4", addr, 2*time.Second)
		return err
	})
	return c, err
}

// TestMasquerade exercises the production NAT path, toward the harness
// namespace only: with Masquerade the upstream sees the host's uplink
// address, without it the slot's own.
func TestMasquerade(t *testing.T) {
	for _, masq := range []bool{false, true} {
		t.Run(map[bool]string{false: "routed", true: "masquerade"}[masq], func(t *testing.T) {
			requireRoot(t)
			ctx := context.Background()
			rig, err := egresstest.New(ctx, "tm")
			if err != nil {
				t.Fatal(err)
			}
			defer rig.Close()
			cfg := rig.Config()
			cfg.Masquerade = masq
			svc, err := egress.NewService(ctx, cfg, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := svc.Close(ctx); err != nil {
					t.Error(err)
				}
				if left, _ := egress.Find(ctx, cfg); !left.Empty() {
					t.Errorf("leftovers: %+v", left)
				}
			}()
			s, err := svc.NewSlot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Apply(ctx, egress.Binding{Tenant: "a", Invocation: "nat", Policy: netpolicy.Policy{Allow: []netpolicy.Rule{{CIDR: "10.213.200.1/32", Ports: []uint16{egresstest.WhoAmIPort}}}}}); err != nil {
				t.Fatal(err)
			}
			c, err := dialFrom(s, "10.213.200.1:7004")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			host, _, _ := net.SplitHostPort(strings.TrimSpace(line))
			want := s.Addr().String()
			if masq {
				want = egresstest.HostTrans.String()
			}
			if host != want {
				t.Errorf("upstream saw %s, want %s", host, want)
			}
		})
	}
}

// TestProxyConnectionCap: probe 59 — a slot's proxied connections are
// capped, and the proxy keeps serving once they close.
func TestProxyConnectionCap(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	rig, err := egresstest.New(ctx, "tf")
	if err != nil {
		t.Fatal(err)
	}
	defer rig.Close()
	cfg := rig.Config()
	cfg.MaxConnsPerSlot = 3
	svc, err := egress.NewService(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(ctx)
	s, err := svc.NewSlot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, egress.Binding{Tenant: "a", Invocation: "flood", Policy: netpolicy.Policy{Allow: []netpolicy.Rule{{Host: "allowed.test", Ports: []uint16{443}}}}}); err != nil {
		t.Fatal(err)
	}
	proxy := s.Gateway().String() + ":3128"
	var held []net.Conn
	for range 3 {
		c, err := dialFrom(s, proxy)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	over, err := dialFrom(s, proxy)
	if err != nil {
		t.Fatal(err)
	}
	_ = over.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := over.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("connection over the cap: read %d, %v; want EOF (closed by the proxy)", n, err)
	}
	over.Close()
	for _, c := range held {
		c.Close()
	}
	// The proxy notices the closes asynchronously: retry until it serves.
	var line string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		c, err := dialFrom(s, proxy)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		io.WriteString(c, "CONNECT other.test:443 HTTP/1.1\r\nHost: other.test\r\n\r\n")
		line, _ = bufio.NewReader(c).ReadString('\n')
		c.Close()
		if line != "" {
			break
		}
	}
	if !strings.Contains(line, "403") {
		t.Errorf("after the flood the proxy should answer (403 for a denied name): %q", line)
	}
}

// TestReleaseEndsProxiedStreams: no proxied stream outlives its binding.
func TestReleaseEndsProxiedStreams(t *testing.T) {
	e := newEnv(t, "tx")
	ctx := context.Background()
	s := e.slot(t)
	if err := s.Apply(ctx, egress.Binding{Tenant: "a", Invocation: "stream", Policy: netpolicy.Policy{Allow: []netpolicy.Rule{{CIDR: "10.213.200.1/32", Ports: []uint16{7001}}}}}); err != nil {
		t.Fatal(err)
	}
	c, err := dialFrom(s, s.Gateway().String()+":3128")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "CONNECT 10.213.200.1:7001 HTTP/1.1\r\nHost: 10.213.200.1:7001\r\n\r\n")
	br := bufio.NewReader(c)
	status, _ := br.ReadString('\n')
	if !strings.Contains(status, "200") {
		t.Fatalf("CONNECT: %q", status)
	}
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if l == "\r\n" {
			break
		}
	}
	if line, err := br.ReadString('\n'); err != nil || strings.TrimSpace(line) != "10.213.200.1:7001" {
		t.Fatalf("tunnel: %q %v", line, err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("after Release the tunnel still reads: %d %v", n, err)
	}
}
