package egress_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/egress/egresstest"
	"github.com/wovyr/wovyr/egress/netns"
	"github.com/wovyr/wovyr/netpolicy"
)

// guest plays a microVM's NIC on a slot's tap: it writes raw Ethernet
// frames and reads what comes back, as QEMU would.
type guest struct {
	t       *testing.T
	f       *os.File
	mac     net.HardwareAddr
	ip, gw  netip.Addr
	gwMAC   net.HardwareAddr
	srcPort uint16
}

func openTap(t *testing.T, s *egress.Slot, name string) *os.File {
	t.Helper()
	var f *os.File
	if err := netns.Do(s.NetnsPath(), func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return err
		}
		ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return err
		}
		f = os.NewFile(uintptr(fd), name)
		return nil
	}); err != nil {
		t.Fatalf("attach %s: %v", name, err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func (g *guest) write(dst net.HardwareAddr, etype uint16, payload []byte) {
	fr := append(append(append([]byte{}, dst...), g.mac...), byte(etype>>8), byte(etype))
	if _, err := g.f.Write(append(fr, payload...)); err != nil {
		g.t.Fatal(err)
	}
}

func (g *guest) arp(op uint16, tha net.HardwareAddr, tpa netip.Addr) []byte {
	b := []byte{0, 1, 8, 0, 6, 4, byte(op >> 8), byte(op)}
	b = append(b, g.mac...)
	b = append(b, g.ip.AsSlice()...)
	b = append(b, tha...)
	return append(b, tpa.AsSlice()...)
}

// udp sends one datagram to dst from the guest's address.
func (g *guest) udp(dst netip.AddrPort, payload []byte) {
	g.srcPort++
	ul := 8 + len(payload)
	ip := make([]byte, 20, 20+ul)
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(20+ul))
	binary.BigEndian.PutUint16(ip[6:], 0x4000)
	copy(ip[12:], g.ip.AsSlice())
	copy(ip[16:], dst.Addr().AsSlice())
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	u := make([]byte, 8)
	binary.BigEndian.PutUint16(u[0:], g.srcPort)
	binary.BigEndian.PutUint16(u[2:], dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(ul)) // checksum 0: none (IPv4)
	g.write(g.gwMAC, 0x0800, append(append(ip, u...), payload...))
}

// read returns the next UDP payload sent to the guest's current source
// port (answering ARP for its address meanwhile), or nil at the deadline.
func (g *guest) read(d time.Duration) (netip.AddrPort, []byte) {
	deadline := time.Now().Add(d)
	buf := make([]byte, 4096)
	for {
		_ = g.f.SetReadDeadline(deadline)
		n, err := g.f.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return netip.AddrPort{}, nil
		}
		if err != nil {
			g.t.Fatal(err)
		}
		fr := buf[:n]
		if len(fr) < 14 {
			continue
		}
		et, p := binary.BigEndian.Uint16(fr[12:]), fr[14:]
		switch {
		case et == 0x0806 && len(p) >= 28:
			op, spa, tpa := binary.BigEndian.Uint16(p[6:]), netip.AddrFrom4([4]byte(p[14:18])), netip.AddrFrom4([4]byte(p[24:28]))
			if op == 1 && tpa == g.ip {
				g.write(net.HardwareAddr(p[8:14]), 0x0806, g.arp(2, net.HardwareAddr(p[8:14]), spa))
			}
			if op == 2 && spa == g.gw {
				g.gwMAC = append(net.HardwareAddr{}, p[8:14]...)
				return netip.AddrPort{}, []byte("arp")
			}
		case et == 0x0800 && len(p) >= 28 && p[9] == 17:
			ihl := int(p[0]&0xf) * 4
			src := netip.AddrPortFrom(netip.AddrFrom4([4]byte(p[12:16])), binary.BigEndian.Uint16(p[ihl:]))
			if binary.BigEndian.Uint16(p[ihl+2:]) == g.srcPort {
				return src, append([]byte{}, p[ihl+8:]...)
			}
		}
	}
}

// TestTapGuest: a microVM's frames on the slot's tap meet the same
// host-side table, stub and allowlist as a process in the netns.
func TestTapGuest(t *testing.T) {
	e := newEnv(t, "tv")
	ctx := context.Background()
	s := e.slot(t)
	if err := s.AddTap(ctx, "tap0"); err != nil {
		t.Fatal(err)
	}
	if err := s.AddTap(ctx, "eth1"); err == nil {
		t.Fatal("AddTap accepted a name that is not tapN")
	}
	pol := netpolicy.Policy{Allow: []netpolicy.Rule{
		{CIDR: "10.213.200.1/32", Ports: []uint16{egresstest.UDPEchoPort}, Protocol: "udp"},
		{Host: "allowed.test", Ports: []uint16{443}},
	}}
	// Apply after AddTap: the claim-time scrub must keep the tap wired.
	if err := s.Apply(ctx, egress.Binding{Tenant: "vm", Invocation: "tap-1", Policy: pol}); err != nil {
		t.Fatal(err)
	}
	g := &guest{t: t, f: openTap(t, s, "tap0"), mac: net.HardwareAddr{2, 0, 0, 0xaa, 0, 1}, ip: s.Addr(), gw: s.Gateway(), srcPort: 40000}
	// Like a booting guest, retry ARP: the kernel activates the tap's queue
	// only when its link watcher notices the carrier (up to a second).
	resolved := false
	for range 5 {
		g.write(net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 0x0806, g.arp(1, make(net.HardwareAddr, 6), g.gw))
		if _, p := g.read(time.Second); string(p) == "arp" {
			resolved = true
			break
		}
	}
	if !resolved {
		t.Fatal("no ARP reply from the gateway through the tap")
	}

	allowed := netip.AddrPortFrom(egresstest.Allowed, egresstest.UDPEchoPort)
	g.udp(allowed, []byte("ping"))
	if src, p := g.read(3 * time.Second); src != allowed || !strings.HasPrefix(string(p), allowed.String()) {
		t.Errorf("allowed udp from the guest: got %v %q", src, p)
	}
	g.udp(netip.AddrPortFrom(egresstest.Denied, egresstest.UDPEchoPort), []byte("ping"))
	if src, p := g.read(1500 * time.Millisecond); p != nil {
		t.Errorf("denied udp from the guest got an answer from %v: %q", src, p)
	}

	ask := func(dst netip.AddrPort, name string) *dns.Msg {
		q := new(dns.Msg)
		q.SetQuestion(dns.Fqdn(name), dns.TypeA)
		b, _ := q.Pack()
		g.udp(dst, b)
		_, p := g.read(3 * time.Second)
		r := new(dns.Msg)
		if p == nil || r.Unpack(p) != nil {
			t.Fatalf("no DNS answer for %s via %s", name, dst)
		}
		return r
	}
	if r := ask(netip.AddrPortFrom(s.Gateway(), 53), "allowed.test"); len(r.Answer) != 1 || !bytes.Contains([]byte(r.Answer[0].String()), []byte("10.213.200.1")) {
		t.Errorf("allowed.test from the guest: %v", r)
	}
	// Any resolver address reaches only the stub, never the harness server.
	if r := ask(netip.AddrPortFrom(egresstest.DNSAddr, 53), egresstest.Canary+".exfil.test"); r.Rcode != dns.RcodeNameError {
		t.Errorf("canary from the guest: %v", r)
	}
	for _, q := range e.rig.Queries() {
		if strings.Contains(q, egresstest.Canary) {
			t.Errorf("the harness DNS server saw the canary from the guest: %s", q)
		}
	}
}
