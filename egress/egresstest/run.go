package egresstest

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/sandbox"
)

// TableRun is one configuration's run of the sandbox truth table, which
// every egress row of a backend's battery judges.
type TableRun struct {
	Run
	Err     error
	Summary string // what ran where, for the observation
}

// Prepared is a sandbox a backend prepared in a slot of the rig's service.
type Prepared struct {
	Sandbox sandbox.Sandbox
	ID      string
	Slot    *egress.Slot
	// ProbePath is where the table invocation writes the probe, as the
	// sandbox names it.
	ProbePath string
}

// RunTable builds a rig tagged tag and an egress service on it, has the
// backend prepare two sandboxes on that service (the second is the other
// tenant that the isolation rows aim at), runs the truth table in the
// first from template img, and tears it all down. prepare is called once
// with the service and returns how to prepare one sandbox.
func RunTable(ctx context.Context, tag, img string, probe []byte, prepare func(*egress.Service) func(context.Context) (Prepared, error)) (r *TableRun) {
	r = &TableRun{}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	rig, svc, stop, err := NewWithService(ctx, tag, nil)
	if err != nil {
		r.Err = fmt.Errorf("egress rig: %w", err)
		return r
	}
	defer func() {
		if err := stop(); err != nil && r.Err == nil {
			r.Err = fmt.Errorf("egress rig teardown: %w", err)
		}
	}()
	one := prepare(svc)
	var sbs []Prepared
	defer func() {
		for _, p := range sbs {
			_ = p.Sandbox.Destroy(context.WithoutCancel(ctx))
		}
	}()
	for range 2 {
		p, err := one(ctx)
		if err != nil {
			r.Err = err
			return r
		}
		sbs = append(sbs, p)
	}
	sb, peer := sbs[0], sbs[1]
	gw := sb.Slot.Gateway().String()
	r.Rows = SandboxTable(gw, peer.Slot.Addr().String())
	r.Summary = fmt.Sprintf("%d checks, slot %s, rig %s", len(r.Rows), sb.Slot.Addr(), filepath.Base(rig.HostNetns))
	inv, err := TableInvocation("battery-egress-"+sb.ID, img, sb.ProbePath, r.Rows, rig.CAPEM, gw, probe)
	if err != nil {
		r.Err = err
		return r
	}
	res, err := sb.Sandbox.Run(ctx, inv)
	if err != nil {
		r.Err = err
		return r
	}
	if r.Rep, err = ParseReport(res); err != nil {
		r.Err = err
		return r
	}
	r.Queries = rig.Queries()
	return r
}

// Probes returns the battery probes of the egress rows in controls (row →
// the weakness of its positive control) for backend. Every row judges one
// table run: run makes it for a target's configuration, once per weakness
// (the rows of one configuration share it); weakness says which a target
// is, or why it cannot run. tried describes the run for the observations.
func Probes(controls map[int]battery.Weakness, backend, tried string,
	weakness func(battery.Target) (battery.Weakness, error), run func(context.Context, battery.Target) *TableRun) []battery.Probe {
	var mu sync.Mutex
	runs := map[battery.Weakness]*TableRun{}
	get := func(ctx context.Context, t battery.Target) *TableRun {
		w, err := weakness(t)
		if err != nil {
			return &TableRun{Err: err}
		}
		mu.Lock()
		defer mu.Unlock()
		if r := runs[w]; r != nil {
			return r
		}
		r := run(ctx, t)
		runs[w] = r
		return r
	}
	var out []battery.Probe
	for _, id := range slices.Sorted(maps.Keys(controls)) {
		out = append(out, battery.Probe{ID: id, Weakness: controls[id], Backends: []string{backend},
			Run: func(ctx context.Context, t battery.Target) battery.Observation {
				r := get(ctx, t)
				obs := battery.Observation{Tried: tried + "; " + r.Summary}
				if r.Err != nil {
					obs.Observed = r.Err.Error()
					return obs
				}
				v := Judge(id, r.Run)
				obs.Observed, obs.Secure = v.String(), v.Secure()
				return obs
			}})
	}
	return out
}
