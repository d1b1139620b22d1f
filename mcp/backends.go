package mcp

import (
	"context"
	"fmt"
	"slices"

	"github.com/wovyr/wovyr/sandbox"
)

// ListBackendsInput is list_backends's arguments: none.
type ListBackendsInput struct{}

// BackendsOutput is list_backends's result.
type BackendsOutput struct {
	Trust    string        `json:"trust" jsonschema:"the trust class this server runs every tool call at"`
	Required string        `json:"required" jsonschema:"the weakest backend strength that trust class may run on (its floor)"`
	Selected string        `json:"selected,omitempty" jsonschema:"the backend run_command and run_code use now (the weakest usable one at or above required); empty when none is usable"`
	Backends []BackendInfo `json:"backends" jsonschema:"every backend of this node, weakest first"`
}

// BackendInfo is one backend for the model.
type BackendInfo struct {
	Name      string   `json:"name"`
	Strength  int      `json:"strength" jsonschema:"its place in the isolation order native(1) < wasm(2) < container(3) < gvisor(4) < microvm(5)"`
	Kinds     []string `json:"kinds" jsonschema:"the workload kinds it takes (command, wasm, session)"`
	Available bool     `json:"available" jsonschema:"whether its runtime works on this node"`
	Certified bool     `json:"certified" jsonschema:"whether it passed the escape battery on this node; only certified backends run anything"`
	Egress    bool     `json:"egress" jsonschema:"whether it enforces network allowlists (else: no network at all)"`
	Accel     string   `json:"accel,omitempty"`
	Sessions  bool     `json:"sessions" jsonschema:"whether it holds sessions"`
	Usable    bool     `json:"usable" jsonschema:"whether this server's tool calls can run on it (available, certified, strong enough)"`
	Refuses   []string `json:"refuses" jsonschema:"what it refuses, and why"`
}

func (t *Tools) listBackendsTool() (*tool, error) {
	return define(spec{name: "list_backends", title: "List sandbox backends", readOnly: true,
		description: "List this node's sandbox backends, weakest to strongest, with whether each is available and certified, " +
			"which one the run tools use at this server's trust class, and what each refuses and why. " +
			"Call it to understand a floor-unmet error."}, t.listBackends)
}

func (t *Tools) listBackends(ctx context.Context, api API, _ *ListBackendsInput) (*BackendsOutput, error) {
	sts, err := api.Backends(ctx)
	if err != nil {
		return nil, err
	}
	// Operators may raise floors (never lower them); the daemon applies
	// its own, so this is the default the model can reason with.
	req := sandbox.DefaultFloor(t.cfg.Trust)
	out := &BackendsOutput{Trust: t.cfg.Trust.String(), Required: req.String(), Backends: []BackendInfo{}}
	for _, st := range sts {
		b := BackendInfo{Name: st.Name, Strength: int(st.Strength), Available: st.Capability.Available, Certified: st.Certified,
			Egress: st.Capability.Egress, Accel: st.Capability.Accel, Refuses: []string{}}
		for _, k := range st.Kinds {
			b.Kinds = append(b.Kinds, string(k))
		}
		b.Sessions = slices.Contains(st.Kinds, sandbox.KindSession)
		if !st.Capability.Available {
			b.Refuses = append(b.Refuses, "everything: not available on this node ("+st.Capability.Reason+")")
		} else if !st.Certified {
			b.Refuses = append(b.Refuses, "everything: not certified by the escape battery on this node ("+st.CertReason+")")
		}
		var below []string
		for _, tc := range sandbox.TrustClasses {
			if st.Strength < sandbox.DefaultFloor(tc) {
				below = append(below, tc.String())
			}
		}
		if len(below) > 0 {
			b.Refuses = append(b.Refuses, fmt.Sprintf("trust classes %v: it is weaker than their floor", below))
		}
		if !slices.Contains(st.Kinds, sandbox.KindCommand) {
			b.Refuses = append(b.Refuses, "commands (run_code, run_command): it runs only "+fmt.Sprint(b.Kinds))
		}
		if !b.Sessions {
			b.Refuses = append(b.Refuses, "sessions: its sandboxes are one-shot")
		}
		if !st.Capability.Egress {
			b.Refuses = append(b.Refuses, "network allowlists: it cannot enforce them, so its sandboxes get no network")
		}
		b.Usable = st.Capability.Available && st.Certified && st.Strength >= req && slices.Contains(st.Kinds, sandbox.KindCommand)
		if b.Usable && out.Selected == "" {
			out.Selected = st.Name
		}
		out.Backends = append(out.Backends, b)
	}
	return out, nil
}
