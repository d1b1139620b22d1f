package egress

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/netpolicy"
)

// proxy is the egress proxy. Transparent: the slot's TCP 80 and 443 are
// DNAT'ed to it and the original destination is read back from conntrack.
// Explicit: HTTP_PROXY clients send absolute-form requests or CONNECT.
// Either way a connection goes through only if the name it claims (Host,
// SNI or CONNECT target) is allowed on that port AND the destination IP is
// one the stub handed this binding for that name — so a spoofed SNI, a
// rebound name or an IP literal gets nowhere.
type proxy struct {
	svc                *Service
	httpL, tlsL, connL net.Listener
	httpSrv, connSrv   *http.Server
	transport          *http.Transport
	wg                 sync.WaitGroup
}

type ctxKey int

const (
	infoKey ctxKey = iota
	dstKey
)

// connInfo is what the proxy knows about an accepted connection.
type connInfo struct {
	src, dst netip.AddrPort // dst: the original destination (transparent)
	slot     *Slot
	b        *binding
}

func (p *proxy) listen() error {
	for _, l := range []*net.Listener{&p.httpL, &p.tlsL, &p.connL} {
		var err error
		if *l, err = net.Listen("tcp4", "127.0.0.1:0"); err != nil {
			return err
		}
	}
	return nil
}

func (p *proxy) ports() (uint16, uint16, uint16) {
	port := func(l net.Listener) uint16 { return uint16(l.Addr().(*net.TCPAddr).Port) }
	return port(p.httpL), port(p.tlsL), port(p.connL)
}

func (p *proxy) serve() {
	p.transport = &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return p.svc.dial(ctx, "tcp", ctx.Value(dstKey).(netip.AddrPort))
		},
		// One connection per request: a pooled connection keyed by host
		// could otherwise carry a request to an address not pinned for it.
		DisableKeepAlives:     true,
		ResponseHeaderTimeout: 30 * time.Second,
	}
	connCtx := func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, infoKey, c.(*slotConn).info)
	}
	p.httpSrv = &http.Server{Handler: http.HandlerFunc(p.transparentHTTP), ConnContext: connCtx, ReadHeaderTimeout: 10 * time.Second}
	p.connSrv = &http.Server{Handler: http.HandlerFunc(p.explicit), ConnContext: connCtx, ReadHeaderTimeout: 10 * time.Second}
	go p.httpSrv.Serve(&capListener{Listener: p.httpL, p: p, transparent: true})
	go p.connSrv.Serve(&capListener{Listener: p.connL, p: p})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		l := &capListener{Listener: p.tlsL, p: p, transparent: true}
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go p.transparentTLS(c.(*slotConn))
		}
	}()
}

func (p *proxy) close() {
	for _, s := range []*http.Server{p.httpSrv, p.connSrv} {
		if s != nil {
			_ = s.Close()
		}
	}
	for _, l := range []net.Listener{p.httpL, p.tlsL, p.connL} {
		if l != nil {
			l.Close()
		}
	}
	p.wg.Wait()
}

// decide logs one decision with the invocation it belongs to.
func (p *proxy) decide(info connInfo, via, name string, dst netip.AddrPort, reason string) bool {
	args := []any{"via", via, "src", info.src.Addr(), "name", name, "dst", dst}
	if info.b != nil {
		args = append(args, "tenant", info.b.Tenant, "invocation", info.b.Invocation)
	}
	if reason != "" {
		p.svc.log.Info("egress deny", append(args, "reason", reason)...)
		return false
	}
	p.svc.log.Info("egress allow", args...)
	return true
}

// checkName is the proxy's rule: name is a DNS name the policy allows on
// port, and ip is an address the stub resolved for it for this binding.
// It returns why not, or "".
func (p *proxy) checkName(b *binding, name string, ip netip.Addr, port uint16) string {
	switch {
	case b == nil:
		return "no binding for this source"
	case isIPLiteral(name):
		return "an IP literal is not a name"
	case !netpolicy.ValidName(name):
		return "not a DNS name"
	case !b.Policy.AllowsName(netpolicy.CanonicalName(name), port):
		return "name and port not in policy"
	case p.svc.reserved(ip):
		return "destination is guarded or reserved"
	case !b.pinned(netpolicy.CanonicalName(name), ip):
		return "destination was not resolved by wovyr's stub for this name"
	}
	return ""
}

// isIPLiteral catches every spelling an IP parser might accept: dotted,
// integer ("2130706433"), hex and octal ("0x7f.1"), short ("127.1"),
// bracketed IPv6 and v4-mapped forms. Names never end in a numeric label,
// so this only backs up ValidName.
func isIPLiteral(h string) bool {
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	if len(h) > 1 && h[0] == '[' {
		return true
	}
	last := h
	for i := len(h) - 1; i >= 0; i-- {
		if h[i] == '.' {
			last = h[i+1:]
			break
		}
	}
	if _, err := strconv.ParseUint(last, 0, 64); err == nil {
		return true
	}
	return false
}

// splitHost splits "host[:port]", defaulting the port.
func splitHost(hp string, def uint16) (string, uint16, error) {
	h, ps, err := net.SplitHostPort(hp)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) && ae.Err == "missing port in address" {
			return hp, def, nil
		}
		return "", 0, err
	}
	n, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || n == 0 {
		return "", 0, errors.New("bad port")
	}
	return h, uint16(n), nil
}

// originalDst reads the pre-DNAT destination of a redirected connection.
func originalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, errors.New("not a TCP connection")
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var ap netip.AddrPort
	var serr error
	err = rc.Control(func(fd uintptr) {
		m, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
		if err != nil {
			serr = err
			return
		}
		b := m.Multiaddr
		ap = netip.AddrPortFrom(netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}), uint16(b[2])<<8|uint16(b[3]))
	})
	if err == nil {
		err = serr
	}
	return ap, err
}

// capListener attaches connInfo to each accepted connection and enforces
// the per-slot connection cap (probe 59).
type capListener struct {
	net.Listener
	p           *proxy
	transparent bool
}

type slotConn struct {
	net.Conn
	info connInfo
	once sync.Once
}

func (c *slotConn) Close() error {
	c.once.Do(func() {
		if c.info.b != nil {
			c.info.b.conns.Add(-1)
			c.info.b.untrack(c)
		}
	})
	return c.Conn.Close()
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src, _ := netip.ParseAddrPort(c.RemoteAddr().String())
		info := connInfo{src: src}
		info.slot, info.b = l.p.svc.lookup(src.Addr())
		if l.transparent {
			if info.dst, err = originalDst(c); err != nil {
				l.p.decide(info, "accept", "", info.dst, "no original destination: "+err.Error())
				c.Close()
				continue
			}
		}
		if info.b != nil && int(info.b.conns.Add(1)) > l.p.svc.cfg.MaxConnsPerSlot {
			info.b.conns.Add(-1)
			l.p.decide(info, "accept", "", info.dst, "connection cap reached")
			c.Close()
			continue
		}
		sc := &slotConn{Conn: c, info: info}
		if info.b != nil && !info.b.track(sc) {
			info.b.conns.Add(-1)
			c.Close()
			continue
		}
		return sc, nil
	}
}

// reverse proxies r to dst with its Host as given: nothing of the client's
// is trusted beyond the already-checked name.
func (p *proxy) reverse(w http.ResponseWriter, r *http.Request, host string, dst netip.AddrPort) {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = host
			pr.Out.Host = host
			pr.Out.RequestURI = ""
		},
		Transport: p.transport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.svc.log.Warn("egress upstream failed", "dst", dst, "err", err)
			http.Error(w, "wovyr egress: upstream failed", http.StatusBadGateway)
		},
	}
	rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), dstKey, dst)))
}
