package egresstest

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The probe is what runs inside a sandbox: a test binary whose TestMain
// calls RunProbe when ProbeEnv is set runs the checks of that JSON spec and
// prints one JSON report. With a Child spec it re-executes itself
// (inheriting the netns like any child would) and embeds the child's report.

// ProbeEnv carries the JSON ProbeSpec to a probe process.
const ProbeEnv = "WOVYR_EGRESS_PROBE"

// Check is one probe action; OK in its Outcome means it reached the
// upstream server and got the expected answer.
type Check struct {
	ID    string `json:"id"`
	Kind  string `json:"kind"` // tcp tcp6 udp icmp http tls proxy connect fetch dns spoof tamper tamper-nocap
	Addr  string `json:"addr,omitempty"`
	Host  string `json:"host,omitempty"`
	SNI   string `json:"sni,omitempty"`
	Proxy string `json:"proxy,omitempty"`
	QType string `json:"qtype,omitempty"`
	Net   string `json:"net,omitempty"`
	From  string `json:"from,omitempty"`
	Phase int    `json:"phase,omitempty"` // checks run phase by phase, each phase concurrently
}

// ProbeSpec is what a probe process runs.
type ProbeSpec struct {
	Checks []Check    `json:"checks"`
	CA     []byte     `json:"ca"`
	DNS    string     `json:"dns"` // the resolver fetch uses (the gateway)
	Child  *ProbeSpec `json:"child,omitempty"`
	// Timeout is how long a check waits for a connect or an answer (a
	// dropped packet costs all of it); zero means denyTimeout. A slow
	// sandbox — an emulated (TCG) guest on a loaded host — needs more for
	// its allowed checks to finish at all.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// Outcome is one check's result.
type Outcome struct {
	ID     string `json:"id"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// Report is a probe process's output.
type Report struct {
	Outcomes []Outcome `json:"outcomes"`
	Child    *Report   `json:"child,omitempty"`
	ChildErr string    `json:"child_err,omitempty"`
}

// denyTimeout bounds every connect and read: a dropped packet shows as a
// timeout, so it must be long enough for a loaded machine to answer the
// allowed ones.
const denyTimeout = 1500 * time.Millisecond

// RunProbe runs the spec and prints the report; its result is the exit code.
func RunProbe(specJSON string) int {
	var spec ProbeSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "probe spec:", err)
		return 2
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(spec.CA)
	// Checks of one phase run concurrently (a dropped connect costs a full
	// timeout, so this keeps the timeout generous and the run short);
	// phases run in ascending order, for checks that depend on earlier ones.
	timeout := spec.Timeout
	if timeout <= 0 {
		timeout = denyTimeout
	}
	rep := Report{Outcomes: make([]Outcome, len(spec.Checks))}
	phases := map[int][]int{}
	var order []int
	for i, c := range spec.Checks {
		if _, ok := phases[c.Phase]; !ok {
			order = append(order, c.Phase)
		}
		phases[c.Phase] = append(phases[c.Phase], i)
	}
	slices.Sort(order)
	for _, ph := range order {
		var wg sync.WaitGroup
		for _, i := range phases[ph] {
			wg.Go(func() {
				c := spec.Checks[i]
				ok, detail := runCheck(c, pool, spec.DNS, timeout)
				rep.Outcomes[i] = Outcome{ID: c.ID, OK: ok, Detail: detail}
			})
		}
		wg.Wait()
	}
	if spec.Child != nil {
		b, _ := json.Marshal(spec.Child)
		cmd := exec.Command("/proc/self/exe")
		cmd.Env = []string{ProbeEnv + "=" + string(b)}
		out, err := cmd.Output()
		if err != nil {
			rep.ChildErr = err.Error()
		} else if err := json.Unmarshal(out, &rep.Child); err != nil {
			rep.ChildErr = err.Error()
		}
	}
	_ = json.NewEncoder(os.Stdout).Encode(rep)
	return 0
}

func runCheck(c Check, pool *x509.CertPool, resolver string, timeout time.Duration) (bool, string) {
	d := net.Dialer{Timeout: timeout}
	deadline := func(cn net.Conn) { _ = cn.SetDeadline(time.Now().Add(timeout + 500*time.Millisecond)) }
	switch c.Kind {
	case "tcp", "tcp6":
		if c.From != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(c.From)}
		}
		cn, err := d.Dial(map[string]string{"tcp": "tcp4", "tcp6": "tcp6"}[c.Kind], c.Addr)
		if err != nil {
			return false, err.Error()
		}
		defer cn.Close()
		deadline(cn)
		line, err := bufio.NewReader(cn).ReadString('\n')
		return err == nil && strings.TrimSpace(line) == c.Addr, line
	case "icmp":
		// An echo request on a raw socket (root in the slot; a sandbox uid
		// gets EPERM, which is also "no").
		pc, err := net.ListenPacket("ip4:icmp", "0.0.0.0")
		if err != nil {
			return false, err.Error()
		}
		defer pc.Close()
		msg := []byte{8, 0, 0, 0, 0x77, 0x76, 0, 1, 'w', 'v'}
		var sum uint32
		for i := 0; i < len(msg); i += 2 {
			sum += uint32(msg[i])<<8 | uint32(msg[i+1])
		}
		sum = sum&0xffff + sum>>16
		cs := ^uint16(sum)
		msg[2], msg[3] = byte(cs>>8), byte(cs)
		if _, err := pc.WriteTo(msg, &net.IPAddr{IP: net.ParseIP(c.Addr)}); err != nil {
			return false, err.Error()
		}
		_ = pc.SetReadDeadline(time.Now().Add(timeout))
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return false, err.Error()
			}
			if n >= 8 && buf[0] == 0 && buf[4] == 0x77 && buf[5] == 0x76 {
				return true, "echo reply from " + from.String()
			}
		}
	case "udp":
		cn, err := d.Dial("udp4", c.Addr)
		if err != nil {
			return false, err.Error()
		}
		defer cn.Close()
		_ = cn.SetDeadline(time.Now().Add(timeout))
		_, _ = cn.Write([]byte("ping"))
		buf := make([]byte, 512)
		n, err := cn.Read(buf)
		if err != nil {
			return false, err.Error()
		}
		return strings.HasPrefix(string(buf[:n]), c.Addr), string(buf[:n])
	case "http":
		cn, err := d.Dial("tcp4", c.Addr)
		if err != nil {
			return false, err.Error()
		}
		defer cn.Close()
		deadline(cn)
		fmt.Fprintf(cn, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", c.Host)
		return readHTTP(cn, "local="+c.Addr)
	case "tls":
		cn, err := d.Dial("tcp4", c.Addr)
		if err != nil {
			return false, err.Error()
		}
		defer cn.Close()
		deadline(cn)
		tc := tls.Client(cn, &tls.Config{ServerName: c.SNI, RootCAs: pool, InsecureSkipVerify: c.SNI == ""})
		if err := tc.Handshake(); err != nil {
			return false, "handshake: " + err.Error()
		}
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", c.SNI)
		return readHTTP(tc, "local="+c.Addr)
	case "proxy":
		cn, err := d.Dial("tcp4", c.Proxy)
		if err != nil {
			return false, err.Error()
		}
		defer cn.Close()
		deadline(cn)
		fmt.Fprintf(cn, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", c.Host, c.Host)
		return readHTTP(cn, "host="+c.Host)
	case "connect":
		cn, err := d.Dial("tcp4", c.Proxy)
		if err != nil {
			return false, err.Error()
		}
		defer cn.Close()
		deadline(cn)
		fmt.Fprintf(cn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", c.Host, c.Host)
		br := bufio.NewReader(cn)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			return false, err.Error()
		}
		if resp.StatusCode != 200 {
			return false, resp.Status
		}
		if c.SNI == "" {
			line, err := br.ReadString('\n')
			return err == nil && line != "", line
		}
		tc := tls.Client(&rwConn{Conn: cn, r: br}, &tls.Config{ServerName: c.SNI, RootCAs: pool})
		if err := tc.Handshake(); err != nil {
			return false, "handshake: " + err.Error()
		}
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", c.SNI)
		return readHTTP(tc, "sni="+c.SNI)
	case "fetch":
		r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "udp4", resolver)
		}}
		tr := &http.Transport{DialContext: (&net.Dialer{Timeout: timeout, Resolver: r}).DialContext, Proxy: nil}
		cl := &http.Client{Transport: tr, Timeout: 2 * timeout}
		resp, err := cl.Get(c.Host)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200, resp.Status + " " + string(b)
	case "dns":
		cl := &dns.Client{Net: c.Net, Timeout: timeout + 500*time.Millisecond}
		m := new(dns.Msg)
		qt := dns.TypeA
		if c.QType != "" {
			qt = dns.StringToType[c.QType]
		}
		m.SetQuestion(dns.Fqdn(c.Host), qt)
		r, _, err := cl.Exchange(m, c.Addr)
		if err != nil {
			return false, err.Error()
		}
		var ans []string
		for _, a := range r.Answer {
			ans = append(ans, a.String())
		}
		return r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0, dns.RcodeToString[r.Rcode] + " " + strings.Join(ans, "; ")
	case "spoof":
		// Root inside the slot adds a foreign address and sends from it;
		// the host-side table must drop it.
		eth, err := netlink.LinkByName("eth0")
		if err != nil {
			return false, err.Error()
		}
		a, _ := netlink.ParseAddr(c.From + "/32")
		if err := netlink.AddrAdd(eth, a); err != nil {
			return false, "addr add: " + err.Error()
		}
		return runCheck(Check{Kind: "tcp", Addr: c.Addr, From: c.From}, pool, resolver, timeout)
	case "tamper":
		// The workload, with whatever capabilities it was given, adds an
		// address to eth0 (a container's root: none over a host-owned netns).
		eth, err := netlink.LinkByName("eth0")
		if err != nil {
			return false, err.Error()
		}
		a, _ := netlink.ParseAddr("10.213.0.78/32")
		if err := netlink.AddrAdd(eth, a); err != nil {
			return false, "addr add: " + err.Error()
		}
		return true, "address added to eth0"
	case "tamper-nocap":
		// A thread without capabilities (what every wovyr sandbox is) tries
		// to add an address to eth0.
		type res struct {
			ok     bool
			detail string
		}
		ch := make(chan res, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
			hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
			var data [2]unix.CapUserData
			if err := unix.Capset(&hdr, &data[0]); err != nil {
				ch <- res{false, "capset: " + err.Error()}
				return
			}
			h, err := netlink.NewHandle()
			if err != nil {
				ch <- res{false, err.Error()}
				return
			}
			defer h.Close()
			eth, err := h.LinkByName("eth0")
			if err != nil {
				ch <- res{false, err.Error()}
				return
			}
			a, _ := netlink.ParseAddr("10.213.0.77/32")
			if err := h.AddrAdd(eth, a); err != nil {
				ch <- res{false, err.Error()}
				return
			}
			ch <- res{true, "address added without CAP_NET_ADMIN"}
		}()
		r := <-ch
		return r.ok, r.detail
	}
	return false, "unknown check kind " + c.Kind
}

func readHTTP(r io.Reader, want string) (bool, string) {
	resp, err := http.ReadResponse(bufio.NewReader(r), nil)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == 200 && strings.Contains(string(b), want), resp.Status + " " + strings.TrimSpace(string(b))
}

type rwConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *rwConn) Read(p []byte) (int, error) { return c.r.Read(p) }
