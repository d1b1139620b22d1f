package main

import (
	"context"
	"fmt"

	"github.com/wovyr/wovyr/backend/oci"
	"github.com/wovyr/wovyr/benchmark"
	"github.com/wovyr/wovyr/sandbox"
)

// clonesBench is `wovyr bench --clones`: on this node's microVM backend, a
// clone restored from the template's golden snapshot and run, against a
// cold one-shot VM of the same template, paired round by round (issue 17,
// ADR 0018); then the same on gVisor (ADR 0020), with a warm pool's claim
// beside it. Goldens are captured (or loaded) once, before the rounds.
func clonesBench(ctx context.Context, nd *node, n int) ([]benchmark.Row, error) {
	vm, err := microvmClonesBench(ctx, nd, n)
	if err != nil {
		return nil, err
	}
	gv, err := gvisorClonesBench(ctx, nd, n)
	if err != nil {
		return nil, err
	}
	return append(vm, gv...), nil
}

// runOnce is a round: prepare a sandbox, run inv in it, destroy it.
func runOnce(ctx context.Context, inv *sandbox.Invocation, prepare func() (sandbox.Sandbox, error)) func() error {
	return func() error {
		sb, err := prepare()
		if err != nil {
			return err
		}
		defer sb.Destroy(ctx)
		return resultErr(sb.Run(ctx, inv))
	}
}

func microvmClonesBench(ctx context.Context, nd *node, n int) ([]benchmark.Row, error) {
	b := nd.microvm
	if c := b.Probe(ctx); !c.Available {
		return nil, fmt.Errorf("microvm: %s", c.Reason)
	}
	tmpl := sandbox.Template{Kind: sandbox.KindCommand}
	g, err := b.Golden(ctx, tmpl)
	if err != nil {
		return nil, err
	}
	inv := &sandbox.Invocation{Tenant: "bench", Policy: sandbox.Policy{Trust: sandbox.Hostile},
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/true"}}}
	restore := runOnce(ctx, inv, func() (sandbox.Sandbox, error) { return b.Restore(ctx, g) })
	cold := runOnce(ctx, inv, func() (sandbox.Sandbox, error) { return b.Prepare(ctx, tmpl) })
	r, err := benchmark.Measure(benchmark.Pair{Name: "microvm clone: restore+run+destroy of /bin/true", Subject: restore,
		Peer: cold, PeerName: "cold one-shot VM"}, n, 1)
	if err != nil {
		return nil, err
	}
	return []benchmark.Row{r}, nil
}

// gvisorClonesBench: a gVisor clone (a pooled, snapshotting backend of its
// own, as `"snapshots": {"gvisor": true}` builds) and a warm pool's claim,
// each against a cold one-shot gVisor sandbox of the same template.
func gvisorClonesBench(ctx context.Context, nd *node, n int) ([]benchmark.Row, error) {
	var cold *oci.Backend
	for _, b := range nd.oci {
		if b.Name() == "gvisor" {
			cold = b
		}
	}
	if cold == nil {
		return nil, fmt.Errorf("gvisor: not constructed on this node")
	}
	pooled, err := oci.NewGVisor(oci.Config{StateDir: nd.g.stateDir, Agent: nd.g.guest, Logger: nd.log,
		WasmRunner: wasmRunner(), Pooled: true, Snapshots: true})
	if err != nil {
		return nil, err
	}
	for _, b := range []*oci.Backend{cold, pooled} {
		if c := b.Probe(ctx); !c.Available {
			return nil, fmt.Errorf("gvisor: %s", c.Reason)
		}
	}
	tmpl := sandbox.Template{Kind: sandbox.KindCommand}
	g, err := pooled.Golden(ctx, tmpl)
	if err != nil {
		return nil, err
	}
	defer pooled.RemoveGoldens()
	inv := &sandbox.Invocation{Tenant: "bench", Policy: sandbox.Policy{Trust: sandbox.Untrusted},
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/true"}}}
	oneShot := runOnce(ctx, inv, func() (sandbox.Sandbox, error) { return cold.Prepare(ctx, tmpl) })
	clone, err := benchmark.Measure(benchmark.Pair{Name: "gvisor clone: restore+run+destroy of /bin/true", Subject: runOnce(ctx, inv,
		func() (sandbox.Sandbox, error) { return pooled.Restore(ctx, g) }), Peer: oneShot, PeerName: "cold one-shot gVisor"}, n, 1)
	if err != nil {
		return nil, err
	}
	var warm sandbox.Sandbox // what the pool holds before each round's request
	claim, err := benchmark.Measure(benchmark.Pair{Name: "gvisor warm pool: claim+run+destroy of /bin/true",
		Setup:   func() (err error) { warm, err = pooled.Prepare(ctx, tmpl); return err },
		Subject: runOnce(ctx, inv, func() (sandbox.Sandbox, error) { return warm, nil }), Peer: oneShot, PeerName: "cold one-shot gVisor"}, n, 1)
	if err != nil {
		return nil, err
	}
	return []benchmark.Row{clone, claim}, nil
}
