package egresstest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/wovyr/wovyr/egress/netns"
)

// BigSize is the size of the /big download (benchmarks).
const BigSize = 1 << 20

// Names the TLS certificate covers.
var certNames = []string{"allowed.test", "other.test", "rebind.test", "*.wild.test", "wild.test", "front.test"}

func (r *Rig) startServers() error {
	cert, err := selfSigned()
	if err != nil {
		return err
	}
	r.CA = x509.NewCertPool()
	r.CA.AddCert(cert.Leaf)
	r.CAPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Leaf.Raw})
	return netns.Do(r.UpNetns, func() error {
		for _, p := range []int{EchoPort, EchoPort2, HostSvcPort} {
			l, err := net.Listen("tcp4", fmt.Sprintf(":%d", p))
			if err != nil {
				return err
			}
			r.closers = append(r.closers, l.Close)
			go serveEcho(l)
		}
		// UDP servers bind each address: a wildcard socket would answer
		// from the transit address, which no conntrack entry matches.
		for _, a := range []netip.Addr{Allowed, Denied} {
			for _, p := range []int{UDPEchoPort, 443} {
				pc, err := net.ListenPacket("udp4", netip.AddrPortFrom(a, uint16(p)).String())
				if err != nil {
					return err
				}
				r.closers = append(r.closers, pc.Close)
				go serveUDPEcho(pc)
			}
		}
		wl, err := net.Listen("tcp4", fmt.Sprintf(":%d", WhoAmIPort))
		if err != nil {
			return err
		}
		r.closers = append(r.closers, wl.Close)
		go serveWhoAmI(wl)
		hl, err := net.Listen("tcp4", ":80")
		if err != nil {
			return err
		}
		hs := &http.Server{Handler: http.HandlerFunc(serveHTTP("http")), ReadHeaderTimeout: 5 * time.Second, ErrorLog: quiet}
		r.closers = append(r.closers, hs.Close)
		go hs.Serve(hl)
		tl, err := net.Listen("tcp4", ":443")
		if err != nil {
			return err
		}
		ts := &http.Server{Handler: http.HandlerFunc(serveHTTP("https")), ReadHeaderTimeout: 5 * time.Second, ErrorLog: quiet,
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
		r.closers = append(r.closers, ts.Close)
		go ts.ServeTLS(tl, "", "")
		dh := dns.HandlerFunc(r.serveDNS)
		for _, n := range []string{"udp4", "tcp4"} {
			s := &dns.Server{Addr: DNSAddr.String() + ":53", Net: n, Handler: dh}
			if n == "udp4" {
				s.PacketConn, err = net.ListenPacket(n, s.Addr)
			} else {
				s.Listener, err = net.Listen(n, s.Addr)
			}
			if err != nil {
				return err
			}
			if err := activate(s); err != nil {
				return err
			}
			r.closers = append(r.closers, s.Shutdown)
		}
		return nil
	})
}

// startHostServices starts the "host service" echo listeners in the
// stand-in host netns (127.0.0.1 and the transit address). New calls it.
func (r *Rig) startHostServices() error {
	return netns.Do(r.HostNetns, func() error {
		for _, a := range []string{"127.0.0.1", HostTrans.String()} {
			l, err := net.Listen("tcp4", fmt.Sprintf("%s:%d", a, HostSvcPort))
			if err != nil {
				return err
			}
			r.closers = append(r.closers, l.Close)
			go serveEcho(l)
		}
		return nil
	})
}

// quiet drops the servers' own error log (denied handshakes are expected).
var quiet = log.New(io.Discard, "", 0)

// serveEcho writes "<local addr>\n" and then echoes.
func serveEcho(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "%s\n", c.LocalAddr())
			_, _ = io.Copy(c, c)
		}()
	}
}

// serveWhoAmI writes the address the connection came from.
func serveWhoAmI(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		fmt.Fprintf(c, "%s\n", c.RemoteAddr())
		c.Close()
	}
}

func serveUDPEcho(pc net.PacketConn) {
	buf := make([]byte, 2048)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = pc.WriteTo(append([]byte(pc.LocalAddr().String()+" "), buf[:n]...), from)
	}
}

// serveHTTP answers "<scheme> host=<Host> sni=<SNI> local=<addr>", a 1 MiB
// body at /big, and a redirect to ?to= at /redirect.
func serveHTTP(scheme string) func(http.ResponseWriter, *http.Request) {
	big := bytes.Repeat([]byte("x"), BigSize)
	return func(w http.ResponseWriter, req *http.Request) {
		switch req.URL.Path {
		case "/big":
			_, _ = w.Write(big)
			return
		case "/redirect":
			http.Redirect(w, req, req.URL.Query().Get("to"), http.StatusFound)
			return
		}
		sni := ""
		if req.TLS != nil {
			sni = req.TLS.ServerName
		}
		local := req.Context().Value(http.LocalAddrContextKey).(net.Addr)
		fmt.Fprintf(w, "%s host=%s sni=%s local=%s\n", scheme, req.Host, sni, local)
	}
}

// serveDNS is authoritative for "test.": it records every question, then
// answers from a fixed zone. rebind.test answers with TTL 0 and cycles
// through the allowed server, the denied server and the metadata address.
func (r *Rig) serveDNS(w dns.ResponseWriter, q *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(q)
	m.Authoritative = true
	defer func() { _ = w.WriteMsg(m) }()
	if len(q.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		return
	}
	qn := q.Question[0]
	name := strings.ToLower(strings.TrimSuffix(qn.Name, "."))
	r.mu.Lock()
	r.queries = append(r.queries, name)
	n := r.rebinds
	if name == "rebind.test" && qn.Qtype == dns.TypeA {
		r.rebinds++
	}
	r.mu.Unlock()
	if !strings.HasSuffix(name, ".test") {
		m.Rcode = dns.RcodeRefused
		return
	}
	ip, ttl := Allowed, uint32(300)
	switch {
	case name == "other.test" || name == "front.test":
		ip = Denied
	case name == "meta.test":
		ip = Metadata
	case name == "host.test": // the stand-in host's own address
		ip = HostTrans
	case name == "rebind.test":
		ip, ttl = []netip.Addr{Allowed, Denied, Metadata}[n%3], 0
	}
	switch qn.Qtype {
	case dns.TypeA:
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: qn.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: net.IP(ip.AsSlice())})
	case dns.TypeTXT:
		m.Answer = append(m.Answer, &dns.TXT{Hdr: dns.RR_Header{Name: qn.Name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: ttl}, Txt: []string{"rig"}})
	}
}

func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "wovyr egress rig"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: certNames, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// activate starts s and returns once it serves: Shutdown before then fails
// ("server not started") and leaves it serving.
func activate(s *dns.Server) error {
	started, failed := make(chan struct{}), make(chan error, 1)
	s.NotifyStartedFunc = func() { close(started) }
	go func() { failed <- s.ActivateAndServe() }()
	select {
	case <-started:
		return nil
	case err := <-failed:
		return fmt.Errorf("dns server: %w", err)
	}
}
