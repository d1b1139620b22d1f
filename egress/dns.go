package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/miekg/dns"

	"github.com/wovyr/wovyr/netpolicy"
)

// stub is the DNS resolver every slot's port-53 traffic is redirected to.
// It answers A queries for names the slot's policy allows, resolving them
// upstream from the host side, and NXDOMAIN for every other name; it
// forwards nothing it was not allowed to, so a query for
// "<secret>.attacker.example" never leaves the host. It remembers which
// addresses it handed to which binding: the proxy pins connections to them.
type stub struct {
	svc  *Service
	port uint16
	udp  net.PacketConn
	tcp  net.Listener
	srv  []*dns.Server
}

// maxTTL caps the TTL handed out; pinning does not depend on it.
const maxTTL = 60

func (s *stub) listen() error {
	tcp, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.tcp = tcp
	s.port = uint16(tcp.Addr().(*net.TCPAddr).Port)
	s.udp, err = net.ListenPacket("udp4", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), s.port).String())
	return err
}

// serve returns once both servers serve, so that close can always shut
// them down (Shutdown before a server started fails and leaves it running).
func (s *stub) serve() {
	h := dns.HandlerFunc(s.handle)
	s.srv = []*dns.Server{{PacketConn: s.udp, Handler: h}, {Listener: s.tcp, Handler: h}}
	for _, srv := range s.srv {
		started, failed := make(chan struct{}), make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() {
			_ = srv.ActivateAndServe() // fails only on a closed listener
			close(failed)
		}()
		select {
		case <-started:
		case <-failed:
		}
	}
}

func (s *stub) close() {
	for _, srv := range s.srv {
		_ = srv.Shutdown()
	}
	if s.srv == nil {
		if s.udp != nil {
			s.udp.Close()
		}
		if s.tcp != nil {
			s.tcp.Close()
		}
	}
}

func (s *stub) handle(w dns.ResponseWriter, q *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(q)
	m.RecursionAvailable = true
	defer func() { _ = w.WriteMsg(m) }()
	src, _ := netip.ParseAddrPort(w.RemoteAddr().String())
	sl, b := s.svc.lookup(src.Addr())
	if len(q.Question) != 1 || q.Opcode != dns.OpcodeQuery {
		m.Rcode = dns.RcodeFormatError
		return
	}
	qn := q.Question[0]
	name := netpolicy.CanonicalName(qn.Name)
	log := s.svc.log.With("via", "dns", "src", src.Addr(), "name", name, "qtype", dns.TypeToString[qn.Qtype])
	if sl == nil || b == nil {
		m.Rcode = dns.RcodeNameError
		log.Info("egress deny", "reason", "no binding for this source")
		return
	}
	log = log.With("tenant", b.Tenant, "invocation", b.Invocation)
	if !netpolicy.ValidName(name) || !b.Policy.AllowsNameAnyPort(name) {
		m.Rcode = dns.RcodeNameError
		log.Info("egress deny", "reason", "name not in policy")
		return
	}
	if qn.Qtype != dns.TypeA {
		// Slots are IPv4-only, and only addresses are answered: an allowed
		// name gets an empty NOERROR for AAAA, TXT and the rest.
		log.Info("egress allow", "reason", "allowed name, no data for this type")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ips, ttl, err := s.resolve(ctx, name)
	if err != nil {
		m.Rcode = dns.RcodeServerFailure
		log.Warn("egress dns upstream failed", "err", err)
		return
	}
	var kept []netip.Addr
	for _, ip := range ips {
		if s.svc.reserved(ip) {
			log.Warn("egress deny answer", "addr", ip, "reason", "upstream answered a guarded or reserved address")
			continue
		}
		kept = append(kept, ip)
	}
	if len(kept) == 0 {
		m.Rcode = dns.RcodeNameError
		log.Info("egress deny", "reason", "no usable address")
		return
	}
	b.remember(name, kept)
	for _, ip := range kept {
		m.Answer = append(m.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: dns.Fqdn(name), Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl},
			A:   net.IP(ip.AsSlice()),
		})
	}
	log.Info("egress allow", "addrs", kept)
}

// resolve asks the upstream resolvers for name's A records, from the host
// netns. CNAME chains are flattened: only the addresses are kept.
func (s *stub) resolve(ctx context.Context, name string) ([]netip.Addr, uint32, error) {
	if len(s.svc.cfg.UpstreamDNS) == 0 {
		return nil, 0, errors.New("no upstream resolver configured")
	}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	var lastErr error
	for _, up := range s.svc.cfg.UpstreamDNS {
		r, err := s.exchange(ctx, q, up)
		if err != nil {
			lastErr = err
			continue
		}
		if r.Rcode != dns.RcodeSuccess {
			return nil, 0, errors.New("upstream: " + dns.RcodeToString[r.Rcode])
		}
		ttl := uint32(maxTTL)
		var ips []netip.Addr
		for _, rr := range r.Answer {
			if a, ok := rr.(*dns.A); ok {
				if ip, ok := netip.AddrFromSlice(a.A.To4()); ok {
					ips = append(ips, ip)
					ttl = min(ttl, a.Hdr.Ttl)
				}
			}
		}
		return ips, ttl, nil
	}
	return nil, 0, lastErr
}

func (s *stub) exchange(ctx context.Context, q *dns.Msg, up netip.AddrPort) (*dns.Msg, error) {
	r, err := s.roundTrip(ctx, "udp", q, up)
	if err == nil && r.Truncated {
		return s.roundTrip(ctx, "tcp", q, up)
	}
	return r, err
}

// roundTrip sends q to up over network from the host netns.
func (s *stub) roundTrip(ctx context.Context, network string, q *dns.Msg, up netip.AddrPort) (*dns.Msg, error) {
	c, err := s.svc.dial(ctx, network, up)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	dc := &dns.Conn{Conn: c}
	if err := dc.WriteMsg(q); err != nil {
		return nil, err
	}
	return dc.ReadMsg()
}

// lookupForProxy resolves name for a binding that has not asked the stub
// (explicit proxy clients leave resolution to the proxy), with the same
// filtering, and records the result.
func (s *stub) lookupForProxy(ctx context.Context, b *binding, name string) ([]netip.Addr, error) {
	ips, _, err := s.resolve(ctx, name)
	if err != nil {
		return nil, err
	}
	var kept []netip.Addr
	for _, ip := range ips {
		if !s.svc.reserved(ip) {
			kept = append(kept, ip)
		}
	}
	if len(kept) == 0 {
		return nil, errors.New("no usable address")
	}
	b.remember(name, kept)
	return kept, nil
}
