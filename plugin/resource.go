package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/sandbox"
)

// Resources a plugin exports outlive the call that made them. A call that
// returns one (a constructor, say) leaves it in the instance that ran it,
// and the caller gets a handle, {"resource": "counter", "handle": 17}. That
// instance is then pinned to the tenant: calls that pass its handles go to
// it, one at a time, and no other call takes it. The instance is unpinned
// when it holds no more handles (the resources were handed to calls that
// took them, or dropped), and closed, its handles with it, after a failed
// call, after PinnedIdle without a call, or when the tenant pins more than
// MaxPinned instances of the plugin (the least recently used goes).
//
// Handles are looked up only among the calling tenant's pinned instances,
// so another tenant's handle is as unknown as a made-up one. Plugins that
// run out of process (isolated.go) keep nothing between calls: their
// functions that take or return resources are refused.

const (
	// MaxPinned is how many instances holding resources a tenant keeps per
	// plugin.
	MaxPinned = 8
	// PinnedIdle is how long an instance holding resources waits for a call.
	PinnedIdle = 10 * time.Minute
)

// dropPrefix names the function that drops a resource, as the component
// model names the built-in ("wovyr:test/counters#[resource-drop]counter").
const dropPrefix = "[resource-drop]"

// pinned is an instance holding resources for one tenant.
type pinned struct {
	in   *wasmcapi.Instance
	turn chan struct{} // holds one token: whoever took it uses in
	// Under Plugin.mu:
	held   map[uint64]bool
	used   time.Time
	closed bool
}

// dropFuncs is the drop function of each resource the component exports.
func dropFuncs(c *wasmcapi.Component) map[string]*wasmcapi.Export {
	drops := map[string]*wasmcapi.Export{}
	for _, r := range c.Resources() {
		name := dropPrefix + r.Resource.Name
		if r.Iface != "" {
			name = r.Iface + "#" + name
		}
		own := &wasmcapi.Type{Kind: wasmcapi.KindResource, Resource: r.Resource}
		drops[name] = &wasmcapi.Export{Name: name, Type: &wasmcapi.FuncType{Params: []wasmcapi.Field{{Name: "self", Type: own}}}}
	}
	return drops
}

// argHandles lists the handles in a call's arguments, each with the
// parameter it is in.
func argHandles(ft *wasmcapi.FuncType, vals []wasmcapi.Val) (handles []uint64, params []string) {
	for i, p := range ft.Params {
		wasmcapi.EachResource(p.Type, &vals[i], func(_ *wasmcapi.Type, v *wasmcapi.Val) error {
			handles, params = append(handles, v.Handle), append(params, p.Name)
			return nil
		})
	}
	return handles, params
}

// pinnedFor returns the tenant's pinned instance that holds handles, its
// turn taken. Handles it does not know, or held by two instances, are
// bad-input and nothing runs.
func (p *Plugin) pinnedFor(ctx context.Context, tenant string, handles []uint64, params []string) (*pinned, error) {
	p.mu.Lock()
	var pn *pinned
	for i, h := range handles {
		j := slices.IndexFunc(p.pinned[tenant], func(x *pinned) bool { return x.held[h] })
		if j < 0 {
			p.mu.Unlock()
			return nil, sandbox.Errorf(sandbox.BadInput, "args."+params[i], "no resource with handle %d is held for tenant %s (dropped, taken by a call, or closed with its instance after a failed call or %v idle)", h, tenant, PinnedIdle)
		}
		if pn != nil && pn != p.pinned[tenant][j] {
			p.mu.Unlock()
			return nil, sandbox.Errorf(sandbox.BadInput, "args."+params[i], "handle %d belongs to another instance than handle %d: resources made by different calls' instances cannot meet in one call", h, handles[0])
		}
		pn = p.pinned[tenant][j]
	}
	p.mu.Unlock()
	select {
	case <-pn.turn:
	case <-ctx.Done():
		return nil, sandbox.Wrap(sandbox.Killed, ctx.Err(), "waiting for the instance that holds the resources")
	}
	p.mu.Lock()
	closed := pn.closed
	p.mu.Unlock()
	if closed { // evicted while we waited
		return nil, sandbox.Errorf(sandbox.BadInput, "args."+params[0], "the instance that held handle %d was closed (%v idle, or more than %d pinned)", handles[0], PinnedIdle, MaxPinned)
	}
	return pn, nil
}

// settle files in after a call that ended ok: pinned while it holds
// resources, else idle for the tenant's next call. pn is the pinned
// instance the call ran on, nil if it came from the idle ones.
func (p *Plugin) settle(tenant string, in *wasmcapi.Instance, pn *pinned) {
	if in.Handles() == 0 {
		if pn != nil {
			p.unpin(p.idleKey(tenant), pn, false)
		}
		p.put(tenant, in)
		return
	}
	tenant = p.idleKey(tenant)
	held := in.HandleSet()
	p.mu.Lock()
	if pn == nil {
		if p.idle == nil { // the plugin was removed meanwhile
			p.mu.Unlock()
			in.Close()
			return
		}
		pn = &pinned{in: in, turn: make(chan struct{}, 1)}
		p.pinned[tenant] = append(p.pinned[tenant], pn)
	}
	pn.held, pn.used = held, time.Now()
	evict := p.overPinned(tenant, pn)
	p.mu.Unlock()
	pn.turn <- struct{}{}
	for _, x := range evict {
		x.in.Close()
	}
}

// overPinned takes out of the tenant's pinned instances (under p.mu) those
// past MaxPinned, least recently used first, and those idle past
// PinnedIdle: the ones whose turn is free, never keep. The caller closes them.
func (p *Plugin) overPinned(tenant string, keep *pinned) []*pinned {
	list := p.pinned[tenant]
	slices.SortFunc(list, func(a, b *pinned) int { return a.used.Compare(b.used) })
	var out []*pinned
	now := time.Now()
	for _, x := range list {
		if x == keep || len(list)-len(out) <= MaxPinned && now.Sub(x.used) < PinnedIdle {
			continue
		}
		select {
		case <-x.turn:
			x.closed = true
			out = append(out, x)
		default: // in a call: it settles itself
		}
	}
	if p.pinned[tenant] = slices.DeleteFunc(list, func(x *pinned) bool { return x.closed }); len(p.pinned[tenant]) == 0 {
		delete(p.pinned, tenant)
	}
	return out
}

// unpin removes pn from the tenant's pinned instances, and closes its
// instance if closeIt (else the caller files it elsewhere). The caller
// holds pn's turn.
func (p *Plugin) unpin(tenant string, pn *pinned, closeIt bool) {
	p.mu.Lock()
	pn.closed = true
	if p.pinned[tenant] = slices.DeleteFunc(p.pinned[tenant], func(x *pinned) bool { return x == pn }); len(p.pinned[tenant]) == 0 {
		delete(p.pinned, tenant)
	}
	p.mu.Unlock()
	pn.turn <- struct{}{} // a waiter sees closed
	if closeIt {
		pn.in.Close()
	}
}

// sweepPinned closes every tenant's pinned instances idle past PinnedIdle.
func (p *Plugin) sweepPinned() {
	p.mu.Lock()
	var evict []*pinned
	for tenant := range p.pinned {
		evict = append(evict, p.overPinned(tenant, nil)...)
	}
	p.mu.Unlock()
	for _, x := range evict {
		x.in.Close()
	}
}

// refusedHandle is bad-input for a handle the instance refused before
// anything ran (one of another resource type, or passed twice); any other
// error is returned as it is.
func refusedHandle(err error) error {
	if err == nil {
		return nil // before he, which escapes
	}
	var he *wasmcapi.HandleError
	if !errors.As(err, &he) {
		return err
	}
	return sandbox.Errorf(sandbox.BadInput, "args."+he.Param, "expected %s: handle %d %s", he.Want, he.Handle, he.Reason)
}

// refuseIsolatedResources refuses, for a plugin run out of process, a
// function whose arguments or result hold resources.
func refuseIsolatedResources(name string, f *wasmcapi.Export) error {
	uses := wasmcapi.HasResource(f.Type.Result) // a drop function takes its resource: a parameter
	for _, p := range f.Type.Params {
		uses = uses || wasmcapi.HasResource(p.Type)
	}
	if !uses {
		return nil
	}
	return sandbox.Errorf(sandbox.BadInput, "func", "%s takes or returns a resource, which cannot outlive the call of plugin %s: each of its calls runs in a fresh sandbox (isolated)", f.Name, name)
}

// callDrop drops the resource a handle names (a [resource-drop] call).
func (p *Plugin) callDrop(ctx context.Context, in *wasmcapi.Instance, h uint64, spec wasmcapi.CallSpec) (*wasmcapi.CallResult, error) {
	r, err := in.Drop(ctx, h, spec)
	if errors.Is(err, wasmcapi.ErrNotHeld) {
		return nil, sandbox.Errorf(sandbox.BadInput, "args.self", "no resource with handle %d is held", h)
	}
	if err != nil {
		return nil, fmt.Errorf("plugin: drop: %w", err)
	}
	return r, nil
}
