package plugin

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/egress/netns"
	"github.com/wovyr/wovyr/internal/wasmcapi"
)

// wovyr:host/http's bounds (wit/host.wit).
const (
	maxFetches     = 16
	defaultMaxBody = 1 << 20
	maxIdleSlots   = 2
)

var fetchMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// Headers a plugin may not set: the transport owns them, and Proxy-* would
// speak to the egress proxy rather than the origin.
func reservedHeader(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Host", "Connection", "Content-Length", "Transfer-Encoding", "Te", "Trailer", "Upgrade", "Keep-Alive":
		return true
	}
	return strings.HasPrefix(http.CanonicalHeaderKey(name), "Proxy-")
}

// errProxyDenied is the egress proxy's refusal of a CONNECT.
var errProxyDenied = errors.New("denied by the egress proxy")

// callNet is a call's egress: a slot of the node's egress service bound to
// the call's tenant, invocation and network policy, and a client whose
// every connection is made inside the slot's network namespace to the
// slot's explicit proxy. The proxy decides each request exactly as it does
// for a sandbox in that slot (the name and port against the policy, the
// address against what its stub resolved), so a plugin's HTTP gets no path
// around egress that a workload lacks. In the plugin runner (exec.go) the
// sandbox itself sits in the call's slot: the client speaks to the slot's
// proxy from there, and slot is nil.
type callNet struct {
	slot *egress.Slot
	tr   *http.Transport
	c    *http.Client
}

func (h *Host) openNet(ctx context.Context, st *callState) (*callNet, error) {
	if h.cfg.sandboxNet != nil {
		tr, c := h.fetchClient(h.cfg.sandboxNet.proxy, (&net.Dialer{}).DialContext)
		return &callNet{tr: tr, c: c}, nil
	}
	h.mu.Lock()
	var slot *egress.Slot
	if n := len(h.idleSlots); n > 0 {
		slot, h.idleSlots = h.idleSlots[n-1], h.idleSlots[:n-1]
	}
	h.mu.Unlock()
	if slot == nil {
		var err error
		if slot, err = h.cfg.Egress.NewSlot(ctx); err != nil {
			return nil, err
		}
	}
	b := egress.Binding{Tenant: st.tenant, Invocation: st.invocation, Policy: st.opts.Network}
	if err := slot.Apply(ctx, b); err != nil {
		return nil, errors.Join(err, slot.Close(context.WithoutCancel(ctx)))
	}
	ns := slot.NetnsPath()
	tr, c := h.fetchClient(slot.ProxyAddr().String(), func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := netns.Do(ns, func() (err error) {
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	})
	return &callNet{slot: slot, tr: tr, c: c}, nil
}

// fetchClient is a client whose every request goes to the egress proxy at
// proxy (host:port), over connections dial makes.
func (h *Host) fetchClient(proxy string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*http.Transport, *http.Client) {
	tr := &http.Transport{
		Proxy:       http.ProxyURL(&url.URL{Scheme: "http", Host: proxy}),
		DialContext: dial,
		OnProxyConnectResponse: func(_ context.Context, _ *url.URL, _ *http.Request, res *http.Response) error {
			if res.StatusCode != http.StatusOK && res.Header.Get(egress.DeniedHeader) != "" {
				return errProxyDenied
			}
			return nil
		},
		TLSClientConfig:        &tls.Config{RootCAs: h.roots},
		MaxResponseHeaderBytes: 64 << 10,
		DisableCompression:     true,
	}
	return tr, &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// releaseNet wipes the call's slot for the next call, keeping a few.
func (h *Host) releaseNet(n *callNet) {
	n.tr.CloseIdleConnections()
	if n.slot == nil { // the runner's: its sandbox holds the slot
		return
	}
	ctx := context.Background()
	if err := n.slot.Release(ctx); err != nil {
		h.cfg.Log.Warn("plugin: egress slot release", "err", err)
		_ = n.slot.Close(ctx)
		return
	}
	h.mu.Lock()
	if !h.closed && len(h.idleSlots) < maxIdleSlots {
		h.idleSlots = append(h.idleSlots, n.slot)
		n = nil
	}
	h.mu.Unlock()
	if n != nil {
		_ = n.slot.Close(ctx)
	}
}

// fetch is wovyr:host/http.fetch(request).
func (h *Host) fetch(ctx context.Context, args []wasmcapi.Val) (*wasmcapi.Val, error) {
	st := stateOf(ctx)
	if st == nil {
		return nil, noState(hostHTTP)
	}
	if st.fetches >= maxFetches {
		return errVal("too-many", nil), nil
	}
	st.fetches++
	// The guest waits here, where the epoch deadline cannot reach: the
	// request keeps the call's deadline itself.
	ctx, cancel := context.WithDeadline(ctx, st.deadline)
	defer cancel()
	req, bad := h.fetchRequest(ctx, args[0])
	if bad != "" {
		return errMsg("invalid", bad), nil
	}
	if sn := h.cfg.sandboxNet; sn != nil && sn.proxy == "" {
		// The runner's sandbox has no network: the call's policy is
		// deny-all, which the proxy would have answered so.
		return errMsg("denied", "the call's network policy does not allow "+req.URL.Host), nil
	}
	if st.net == nil {
		n, err := h.openNet(ctx, st)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("fetch: %w", ctx.Err())
			}
			h.cfg.Log.Error("plugin: egress slot", "tenant", st.tenant, "plugin", st.plugin, "err", err)
			return errMsg("failed", "this node could not open the call's network"), nil
		}
		st.net = n
	}
	resp, err := st.net.c.Do(req)
	target := req.URL.Host
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("fetch %s: %w", target, ctx.Err())
	case errors.Is(err, errProxyDenied):
		return errMsg("denied", "the call's network policy does not allow "+target), nil
	case err != nil:
		return errMsg("failed", oneLine(err.Error())), nil
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusForbidden && resp.Header.Get(egress.DeniedHeader) != "" {
		return errMsg("denied", "the call's network policy does not allow "+target), nil
	}
	max := h.maxBody()
	body, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("fetch %s: %w", target, ctx.Err())
	case err != nil:
		return errMsg("failed", oneLine(err.Error())), nil
	case int64(len(body)) > max:
		return errVal("too-large", &wasmcapi.Val{Kind: wasmcapi.KindU64, Uint: uint64(max)}), nil
	}
	var hdrs [][2]string
	for k, vs := range resp.Header {
		for _, v := range vs {
			hdrs = append(hdrs, [2]string{strings.ToLower(k), v})
		}
	}
	slices.SortStableFunc(hdrs, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	if body == nil {
		body = []byte{}
	}
	return okVal(&wasmcapi.Val{Kind: wasmcapi.KindRecord, Names: []string{"status", "headers", "body"}, Elems: []wasmcapi.Val{
		{Kind: wasmcapi.KindU16, Uint: uint64(resp.StatusCode)},
		pairList(hdrs),
		{Kind: wasmcapi.KindList, Bytes: body},
	}}), nil
}

func (h *Host) maxBody() int64 {
	if h.cfg.FetchMaxBody > 0 {
		return h.cfg.FetchMaxBody
	}
	return defaultMaxBody
}

// fetchRequest builds the request a wovyr:host/http request record asks
// for, or says why it is invalid.
func (h *Host) fetchRequest(ctx context.Context, rec wasmcapi.Val) (*http.Request, string) {
	f := map[string]wasmcapi.Val{}
	for i, n := range rec.Names {
		f[n] = rec.Elems[i]
	}
	method := f["method"].Str
	if !slices.Contains(fetchMethods, method) {
		return nil, fmt.Sprintf("method %q is not one of %s", method, strings.Join(fetchMethods, ", "))
	}
	u, err := url.Parse(f["url"].Str)
	switch {
	case err != nil:
		return nil, "the url does not parse"
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, "the url's scheme must be http or https"
	case u.Host == "" || u.User != nil:
		return nil, "the url needs a host and no user info"
	}
	bodyVal := f["body"]
	body := bodyVal.ListBytes()
	if int64(len(body)) > h.maxBody() {
		return nil, fmt.Sprintf("the request body is over %d bytes", h.maxBody())
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, "the request is malformed"
	}
	for _, p := range pairs(f["headers"]) {
		switch {
		case !httpguts.ValidHeaderFieldName(p[0]) || !httpguts.ValidHeaderFieldValue(p[1]):
			return nil, fmt.Sprintf("header %q is malformed", p[0])
		case reservedHeader(p[0]):
			return nil, fmt.Sprintf("header %s is set by the host", http.CanonicalHeaderKey(p[0]))
		}
		req.Header.Add(p[0], p[1])
	}
	return req, ""
}
