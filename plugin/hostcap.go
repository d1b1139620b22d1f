package plugin

import (
	"context"
	"strconv"
	"time"

	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/sandbox"
)

// The host capabilities wovyr offers plugins (wit/host.wit): each is an
// interface of package wovyr:host, linked for every component that imports
// anything, and callable only by components whose manifest grants it (the
// load-time import check). Their functions find the call they serve in
// their context (callState).
const (
	hostLog  = "wovyr:host/log"
	hostKV   = "wovyr:host/kv"
	hostHTTP = "wovyr:host/http"
	// hostVersion is the version the host defines; components built
	// against another 0.1 version are refused by their grant's version.
	hostVersion = "0.1.0"
)

// missing says why this host cannot provide capability iface, or "".
func (h *Host) missing(iface string) string {
	switch {
	case iface == hostKV && h.cfg.KV == nil:
		return "this node has no store for plugin key-value data"
	case iface == hostHTTP && h.cfg.Egress == nil && h.cfg.sandboxNet == nil:
		return "this node has no egress service (outgoing HTTP needs one to hold the call's network policy)"
	}
	return ""
}

// defineHostCaps links the wovyr:host interfaces into l.
func (h *Host) defineHostCaps(l *wasmcapi.Linker) error {
	for iface, funcs := range map[string]map[string]wasmcapi.HostFunc{
		hostLog:  {"log": h.logEntry},
		hostKV:   {"get": h.kvGet, "set": h.kvSet, "delete": h.kvDelete, "keys": h.kvKeys},
		hostHTTP: {"fetch": h.fetch},
	} {
		if err := l.Define(iface+"@"+hostVersion, funcs); err != nil {
			return err
		}
	}
	return nil
}

// checkHostCaps refuses, as unenforceable, a component importing a host
// capability this node cannot provide.
func (h *Host) checkHostCaps(imports []string) error {
	for _, imp := range imports {
		iface, _ := splitVersion(imp)
		if why := h.missing(iface); why != "" {
			return sandbox.Errorf(sandbox.Unenforceable, "manifest.capabilities", "the component imports %s, but %s", imp, why)
		}
	}
	return nil
}

// CallOptions are what a call carries besides its arguments.
type CallOptions struct {
	// Network is the policy wovyr:host/http requests are held to, through
	// the node's egress proxy. The zero value denies everything.
	Network netpolicy.Policy
}

// callState is one call as its host functions see it, in their context.
type callState struct {
	host       *Host
	tenant     string
	plugin     string
	invocation string
	opts       CallOptions
	deadline   time.Time // the call's wall deadline, which host calls keep too

	logs        []LogEntry
	logBytes    int
	logsDropped int
	fetches     int
	net         *callNet // the call's egress slot, from its first fetch
}

type callKey struct{}

func stateOf(ctx context.Context) *callState {
	st, _ := ctx.Value(callKey{}).(*callState)
	return st
}

// newInvocationID names a plugin call in logs and egress decisions: the
// host's random prefix and its count of calls, unique across restarts
// without a read of the system's random source per call.
func (h *Host) newInvocationID() string {
	var b [24]byte
	n := copy(b[:], h.idPrefix)
	return string(strconv.AppendUint(b[:n], h.calls.Add(1), 36))
}

// end releases what the call's host functions took.
func (st *callState) end() {
	if st.net != nil {
		st.host.releaseNet(st.net)
		st.net = nil
	}
}

// noState is the error of a host function called outside a call (from a
// component's start function, while instantiating).
func noState(iface string) error {
	return sandbox.Errorf(sandbox.BadInput, "", "%s is callable only during a call, not while instantiating", iface)
}

// Values the host functions build.

func str(s string) wasmcapi.Val { return wasmcapi.Val{Kind: wasmcapi.KindString, Str: s} }

func okVal(payload *wasmcapi.Val) *wasmcapi.Val {
	return &wasmcapi.Val{Kind: wasmcapi.KindResult, Ok: true, Payload: payload}
}

// errVal is result.err of the interface's error variant, case with msg
// (no payload when msg is nil).
func errVal(kase string, payload *wasmcapi.Val) *wasmcapi.Val {
	return &wasmcapi.Val{Kind: wasmcapi.KindResult, Payload: &wasmcapi.Val{Kind: wasmcapi.KindVariant, Str: kase, Payload: payload}}
}

func errMsg(kase, msg string) *wasmcapi.Val {
	s := str(msg)
	return errVal(kase, &s)
}

// pairs reads a list<tuple<string, string>>.
func pairs(v wasmcapi.Val) [][2]string {
	out := make([][2]string, 0, len(v.Elems))
	for _, e := range v.Elems {
		if len(e.Elems) == 2 {
			out = append(out, [2]string{e.Elems[0].Str, e.Elems[1].Str})
		}
	}
	return out
}

// pairList writes a list<tuple<string, string>>.
func pairList(ps [][2]string) wasmcapi.Val {
	l := wasmcapi.Val{Kind: wasmcapi.KindList, Elems: make([]wasmcapi.Val, len(ps))}
	for i, p := range ps {
		l.Elems[i] = wasmcapi.Val{Kind: wasmcapi.KindTuple, Elems: []wasmcapi.Val{str(p[0]), str(p[1])}}
	}
	return l
}
