package plugin

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/sandbox"
)

// Plugin is one loaded plugin: its compiled component and the idle
// instances kept per tenant.
type Plugin struct {
	host     *Host
	manifest Manifest
	limits   Limits
	comp     *wasmcapi.Component
	linker   *wasmcapi.Linker
	isolated *isolatedCode // what a plugin run out of process runs (isolated.go); nil in-process
	quick    bool          // its code is the quick compile's, until tier-up swaps it (tier.go)

	drops map[string]*wasmcapi.Export // "iface#[resource-drop]R" for each resource R (resource.go)

	mu     sync.Mutex
	refs   int                             // the host's, and one per call in flight
	idle   map[string][]*wasmcapi.Instance // by tenant: state never crosses tenants
	pinned map[string][]*pinned            // by tenant: instances holding resources
}

// Info describes an installed plugin.
type Info struct {
	Name         string             `json:"name"`
	Component    string             `json:"component"`
	Trust        sandbox.TrustClass `json:"trust"`
	Capabilities []string           `json:"capabilities"`
	Imports      []string           `json:"imports"`
	// Isolated says its calls run out of process, each in a fresh sandbox
	// at its trust class's floor (isolated.go).
	Isolated  bool       `json:"isolated,omitempty"`
	Functions []Function `json:"functions"`
	Limits    Limits     `json:"limits"`
	SignedBy  string     `json:"signed_by,omitempty"`
	// Code is "quick" while the plugin runs its first load's quickly
	// compiled code (a large component), "optimized" after (tier.go).
	Code string `json:"code"`
}

// Function is an exported function and its WIT signature.
type Function struct {
	Name      string `json:"name"`
	Signature string `json:"signature"` // "func(a: u32, b: u32) -> u32"
}

func (p *Plugin) info() *Info {
	in := &Info{Name: p.manifest.Name, Component: p.manifest.Component, Trust: p.manifest.Trust,
		Capabilities: append([]string{}, p.manifest.Capabilities...), Imports: p.comp.Imports(), Limits: p.limits,
		Isolated: p.isolated != nil, Code: "optimized"}
	if p.quick {
		in.Code = "quick"
	}
	if in.Imports == nil {
		in.Imports = []string{}
	}
	if p.manifest.Signature != nil {
		in.SignedBy = p.manifest.Signature.KeyID
	}
	for _, f := range p.comp.Funcs() {
		in.Functions = append(in.Functions, Function{Name: f.Name, Signature: signature(f.Type)})
	}
	for _, f := range p.drops {
		in.Functions = append(in.Functions, Function{Name: f.Name, Signature: signature(f.Type)})
	}
	slices.SortFunc(in.Functions, func(a, b Function) int { return strings.Compare(a.Name, b.Name) })
	return in
}

func signature(ft *wasmcapi.FuncType) string {
	var b strings.Builder
	b.WriteString("func(")
	for i, p := range ft.Params {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p.Name + ": " + p.Type.String())
	}
	b.WriteString(")")
	if ft.Result != nil {
		b.WriteString(" -> " + ft.Result.String())
	}
	return b.String()
}

// release drops a reference; the last frees the instances and component.
func (p *Plugin) release() {
	p.mu.Lock()
	p.refs--
	last := p.refs == 0
	idle, pins := p.idle, p.pinned
	if last {
		p.idle, p.pinned = nil, nil
	}
	p.mu.Unlock()
	if !last {
		return
	}
	for _, ins := range idle {
		for _, in := range ins {
			in.Close()
		}
	}
	for _, list := range pins { // no call is in flight: every turn is free
		for _, pn := range list {
			pn.in.Close()
		}
	}
	p.comp.Close()
}

// Result is how a call ended and what it returned.
type Result struct {
	// Value is the function's result in the JSON form of its WIT type
	// (value_in.go); null when it returns nothing or the call failed.
	Value json.RawMessage `json:"value"`
	// End is "ok", "trap", "out-of-fuel", "timeout" or "cancelled".
	End string `json:"end"`
	// Error says what went wrong when End is not "ok".
	Error    string `json:"error,omitempty"`
	FuelUsed uint64 `json:"fuel_used"`
	// Took is the call itself, instantiation excluded, in nanoseconds.
	Took time.Duration `json:"took_ns"`
	// Fresh says the call needed a new instance (none was idle).
	Fresh bool `json:"fresh_instance"`
	// Invocation names the call in the node's log and egress decisions.
	Invocation string `json:"invocation"`
	// Logs are the plugin's wovyr:host/log entries, in order, up to the
	// call's cap; LogsDropped counts those past it.
	Logs        []LogEntry `json:"logs,omitempty"`
	LogsDropped int        `json:"logs_dropped,omitempty"`
}

// checkNetwork refuses, before anything runs, a network policy the call
// cannot be held to: an invalid one (bad-input), or any but deny-all where
// the plugin cannot use the network or the node cannot enforce it.
func (p *Plugin) checkNetwork(opts CallOptions) error {
	if opts.Network.DenyAll() {
		return nil
	}
	if !p.imports(hostHTTP) {
		return sandbox.Errorf(sandbox.BadInput, "network", "plugin %s does not import %s, so a network policy has nothing to govern", p.manifest.Name, hostHTTP)
	}
	return p.host.cfg.Egress.Check(opts.Network)
}

// imports reports whether p's component imports interface iface (of any
// version).
func (p *Plugin) imports(iface string) bool {
	return slices.ContainsFunc(p.comp.Imports(), func(imp string) bool { i, _ := splitVersion(imp); return i == iface })
}

// Call calls fn of plugin name for tenant with JSON args. Arguments that
// do not match fn's WIT signature are bad-input naming the parameter, and
// nothing runs. A call that ends other than ok discards its instance (it
// is poisoned); the tenant's next call gets a fresh one. Instances are kept
// per tenant, so no state crosses tenants.
func (h *Host) Call(ctx context.Context, tenant, name, fn string, args json.RawMessage, opts CallOptions) (*Result, error) {
	p, err := h.acquire(name)
	if err != nil {
		return nil, err
	}
	defer p.release()
	f, ok := p.comp.Func(fn)
	drop := false
	if !ok {
		f, ok = p.drops[fn]
		drop = ok
	}
	if !ok {
		names := make([]string, 0)
		for _, e := range p.info().Functions {
			names = append(names, e.Name)
		}
		return nil, sandbox.Errorf(sandbox.BadInput, "func", "plugin %s exports no function %q (it exports %s)", name, fn, strings.Join(names, ", "))
	}
	if f.Type.Result != nil && f.Type.Result.Kind == wasmcapi.KindUnsupported {
		return nil, sandbox.Errorf(sandbox.BadInput, "func", "%s returns %s, which cannot be written as JSON yet", fn, f.Type.Result)
	}
	vals, err := Args(f.Type, args)
	if err != nil {
		return nil, err
	}
	if err := p.checkNetwork(opts); err != nil {
		return nil, err
	}
	if p.isolated != nil {
		if err := refuseIsolatedResources(name, f); err != nil {
			return nil, err
		}
		return p.callIsolated(ctx, tenant, f, args, opts)
	}
	p.sweepPinned()
	var in *wasmcapi.Instance
	var pn *pinned
	fresh := false
	if handles, params := argHandles(f.Type, vals); len(handles) > 0 {
		if pn, err = p.pinnedFor(ctx, p.idleKey(tenant), handles, params); err != nil {
			return nil, err
		}
		in = pn.in
	} else if in, fresh, err = p.take(tenant); err != nil {
		return nil, err
	}
	invocation := h.newInvocationID()
	cctx, st := ctx, (*callState)(nil)
	if p.linker != h.bare { // only host functions read the call's state
		st = &callState{host: h, tenant: tenant, plugin: name, invocation: invocation, opts: opts,
			deadline: time.Now().Add(p.limits.wall())}
		cctx = context.WithValue(ctx, callKey{}, st)
	}
	h.begin()
	spec := wasmcapi.CallSpec{Fuel: p.limits.Fuel, Wall: p.limits.wall()}
	if h.cfg.weak == weakUnmetered {
		spec.Fuel = 0
	}
	var r *wasmcapi.CallResult
	if drop {
		r, err = p.callDrop(cctx, in, vals[0].Handle, spec)
	} else {
		r, err = in.Call(cctx, f, vals, spec)
	}
	h.end()
	if st != nil {
		st.end()
	}
	if err = refusedHandle(err); sandbox.ClassOf(err) == sandbox.BadInput {
		p.settle(tenant, in, pn) // nothing ran
		return nil, err
	}
	if err != nil {
		p.discard(tenant, in, pn)
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "plugin call")
	}
	res := &Result{Value: json.RawMessage("null"), End: r.End.String(), FuelUsed: r.FuelUsed, Took: r.Took, Fresh: fresh,
		Invocation: invocation}
	if st != nil {
		res.Logs, res.LogsDropped = st.logs, st.logsDropped
	}
	if r.End != wasmcapi.CallOK {
		if h.cfg.weak == weakKeepFailed && pn == nil {
			p.put(tenant, in)
		} else {
			p.discard(tenant, in, pn)
		}
		res.Error = r.Message
		if r.End == wasmcapi.CallOutOfFuel {
			res.Error = "fuel exhausted after " + itoa(int(r.FuelUsed)) + " units"
		}
		return res, nil
	}
	if r.Result != nil {
		if res.Value, err = Value(f.Type.Result, r.Result); err != nil {
			p.discard(tenant, in, pn)
			return nil, sandbox.Wrap(sandbox.BackendFailure, err, "plugin result")
		}
	}
	p.settle(tenant, in, pn)
	return res, nil
}

// discard closes an instance after a failed call, and its handles with it.
func (p *Plugin) discard(tenant string, in *wasmcapi.Instance, pn *pinned) {
	if pn != nil {
		p.unpin(p.idleKey(tenant), pn, true)
		return
	}
	in.Close()
}

// take returns an idle instance of the tenant's, or a fresh one.
func (p *Plugin) take(tenant string) (*wasmcapi.Instance, bool, error) {
	tenant = p.idleKey(tenant)
	p.mu.Lock()
	if ins := p.idle[tenant]; len(ins) > 0 {
		in := ins[len(ins)-1]
		p.idle[tenant] = ins[:len(ins)-1]
		p.mu.Unlock()
		return in, false, nil
	}
	p.mu.Unlock()
	lim := wasmcapi.Limits{Memory: p.limits.Memory}
	if p.host.cfg.weak == weakNoMemoryLimit {
		lim.Memory = 0
	}
	in, err := p.linker.Instantiate(p.comp, lim)
	if err != nil {
		// Load instantiated it once, so this is the pool (all slots busy).
		return nil, false, sandbox.Wrap(sandbox.BackendFailure, err, "plugin instance")
	}
	return in, true, nil
}

// put keeps in for the tenant's next call, up to MaxIdle.
func (p *Plugin) put(tenant string, in *wasmcapi.Instance) {
	tenant = p.idleKey(tenant)
	p.mu.Lock()
	if p.idle != nil && len(p.idle[tenant]) < p.host.cfg.MaxIdle {
		p.idle[tenant] = append(p.idle[tenant], in)
		in = nil
	}
	p.mu.Unlock()
	if in != nil {
		in.Close()
	}
}

// idleKey is whose idle instances a tenant's call takes: the tenant's own.
func (p *Plugin) idleKey(tenant string) string {
	if p.host.cfg.weak == weakSharedInstances {
		return ""
	}
	return tenant
}
