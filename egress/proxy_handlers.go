package egress

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/wovyr/wovyr/netpolicy"
)

// DeniedHeader marks the proxy's own refusals (403), so a client can tell
// them from an origin's 403.
const DeniedHeader = "Wovyr-Egress"

func deny(w http.ResponseWriter) {
	w.Header().Set(DeniedHeader, "denied")
	http.Error(w, "wovyr egress: denied by network policy", http.StatusForbidden)
}

// transparentHTTP handles redirected port-80 traffic: origin-form requests
// whose Host names an allowed name that the stub resolved to the address
// the client actually connected to. Each request is checked, including
// every request on a kept-alive connection.
func (p *proxy) transparentHTTP(w http.ResponseWriter, r *http.Request) {
	info := r.Context().Value(infoKey).(connInfo)
	host, port, err := splitHost(r.Host, info.dst.Port())
	reason := ""
	switch {
	case err != nil:
		reason = "bad Host header"
	case r.Method == http.MethodConnect || r.URL.IsAbs():
		reason = "a transparent connection carries origin-form requests only"
	case port != info.dst.Port():
		reason = "Host port differs from the connected port"
	default:
		reason = p.checkName(info.b, host, info.dst.Addr(), port)
	}
	if !p.decide(info, "http", host, info.dst, reason) {
		deny(w)
		return
	}
	p.reverse(w, r, hostPort(netpolicy.CanonicalName(host), port, 80), info.dst)
}

// explicit handles HTTP_PROXY clients: CONNECT host:port, or an
// absolute-form http:// request. Go's server takes the Host of an
// absolute-form request from its URL, and the request goes upstream with
// that Host, so a mismatched Host header cannot reach the origin.
func (p *proxy) explicit(w http.ResponseWriter, r *http.Request) {
	info := r.Context().Value(infoKey).(connInfo)
	var def uint16 = 80
	via := "proxy"
	if r.Method == http.MethodConnect {
		def, via = 443, "connect"
	} else if !r.URL.IsAbs() || r.URL.Scheme != "http" {
		p.decide(info, via, r.Host, netip.AddrPort{}, "explicit proxy takes CONNECT or absolute http:// requests")
		deny(w)
		return
	}
	target := r.Host
	if r.Method != http.MethodConnect {
		target = r.URL.Host
	}
	host, port, err := splitHost(target, def)
	if err != nil {
		p.decide(info, via, target, netip.AddrPort{}, "bad target")
		deny(w)
		return
	}
	dst, reason := p.pick(r.Context(), info.b, host, port)
	if !p.decide(info, via, host, dst, reason) {
		deny(w)
		return
	}
	if r.Method != http.MethodConnect {
		p.reverse(w, r, hostPort(netpolicy.CanonicalName(host), port, 80), dst)
		return
	}
	up, err := p.svc.dial(r.Context(), "tcp", dst)
	if err != nil {
		http.Error(w, "wovyr egress: upstream failed", http.StatusBadGateway)
		return
	}
	if !info.b.track(up) {
		up.Close()
		return
	}
	defer info.b.untrack(up)
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		return
	}
	c, rw, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	_, _ = c.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
	cc := &bufConn{Conn: c, r: rw.Reader}
	if port == 443 && !isIPLiteral(host) {
		// No domain fronting inside the tunnel: the ClientHello must name
		// the host the tunnel was opened for.
		sni, hello, err := peekClientHello(cc)
		reason := ""
		if err != nil {
			reason = "tunnel does not start with a TLS client hello naming a server: " + err.Error()
		} else if netpolicy.CanonicalName(sni) != netpolicy.CanonicalName(host) {
			reason = "SNI " + sni + " differs from the CONNECT target"
		}
		if !p.decide(info, "connect-sni", sni, dst, reason) {
			c.Close()
			up.Close()
			return
		}
		if _, err := up.Write(hello); err != nil {
			c.Close()
			up.Close()
			return
		}
	}
	splice(cc, up)
}

// pick chooses the destination for an explicit request: for a name, an
// address the stub handed this binding (resolving it now if the client left
// resolution to the proxy); for an IP literal, only one a CIDR rule allows.
func (p *proxy) pick(ctx context.Context, b *binding, host string, port uint16) (netip.AddrPort, string) {
	if b == nil {
		return netip.AddrPort{}, "no binding for this source"
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		if ipAllowed(b.rules, ip, 6, port) && !p.svc.reserved(ip) {
			return netip.AddrPortFrom(ip, port), ""
		}
		return netip.AddrPortFrom(ip, port), "IP literal outside every CIDR rule, or the host's own"
	}
	name := netpolicy.CanonicalName(host)
	if isIPLiteral(host) || !netpolicy.ValidName(name) {
		return netip.AddrPort{}, "not a DNS name"
	}
	if !b.Policy.AllowsName(name, port) {
		return netip.AddrPort{}, "name and port not in policy"
	}
	b.mu.Lock()
	var ips []netip.Addr
	for ip := range b.resolved[name] {
		ips = append(ips, ip)
	}
	b.mu.Unlock()
	if len(ips) == 0 {
		var err error
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		ips, err = p.svc.stub.lookupForProxy(rctx, b, name)
		cancel()
		if err != nil {
			return netip.AddrPort{}, "name does not resolve: " + err.Error()
		}
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	dst := netip.AddrPortFrom(ips[0], port)
	return dst, p.checkName(b, name, dst.Addr(), port)
}

// transparentTLS handles redirected port-443 traffic by its SNI, without
// terminating TLS. When the destination is already an address the stub
// handed this binding for a name allowed on this port, the upstream
// connection is opened while the ClientHello is read (it could be reached
// with the right SNI anyway), and dropped if the SNI then fails the check.
func (p *proxy) transparentTLS(c *slotConn) {
	info := c.info
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type dialed struct {
		c   net.Conn
		err error
	}
	var pre chan dialed
	if info.b != nil && !p.svc.reserved(info.dst.Addr()) && info.b.pinnedAny(info.dst.Addr(), info.dst.Port()) {
		pre = make(chan dialed, 1)
		go func() {
			up, err := p.svc.dial(ctx, "tcp", info.dst)
			pre <- dialed{up, err}
		}()
	}
	sni, hello, err := peekClientHello(c)
	reason := ""
	if err != nil {
		reason = "no TLS client hello with a server name: " + err.Error()
	} else {
		reason = p.checkName(info.b, sni, info.dst.Addr(), info.dst.Port())
	}
	if !p.decide(info, "tls", sni, info.dst, reason) {
		c.Close()
		if pre != nil {
			if d := <-pre; d.c != nil {
				d.c.Close()
			}
		}
		return
	}
	var up net.Conn
	if pre != nil {
		d := <-pre
		up, err = d.c, d.err
	} else {
		up, err = p.svc.dial(ctx, "tcp", info.dst)
	}
	if err != nil {
		p.svc.log.Warn("egress upstream failed", "dst", info.dst, "err", err)
		c.Close()
		return
	}
	if !info.b.track(up) {
		c.Close()
		up.Close()
		return
	}
	defer info.b.untrack(up)
	if _, err := up.Write(hello); err != nil {
		c.Close()
		up.Close()
		return
	}
	splice(c, up)
}

// splice copies both ways until both directions are done, half-closing as
// each side finishes, then closes both. It copies between the raw TCP
// connections where nothing is buffered, so the kernel's splice(2) moves
// the bytes.
func splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(unwrap(dst), reader(src))
		if cw, ok := unwrap(dst).(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
	a.Close()
	b.Close()
}

// reader is the raw connection unless a bufio.Reader still holds bytes.
func reader(c net.Conn) io.Reader {
	if bc, ok := c.(*bufConn); ok && bc.r.Buffered() > 0 {
		return bc
	}
	return unwrap(c)
}

// bufConn reads first what a bufio.Reader already buffered.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func hostPort(h string, port, def uint16) string {
	if port == def {
		return h
	}
	return net.JoinHostPort(h, strconv.Itoa(int(port)))
}

// unwrap strips wovyr's wrappers down to the kernel connection.
func unwrap(c net.Conn) net.Conn {
	for {
		switch x := c.(type) {
		case *slotConn:
			c = x.Conn
		case *bufConn:
			c = x.Conn
		default:
			return c
		}
	}
}
