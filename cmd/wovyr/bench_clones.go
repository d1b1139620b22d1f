package main

import (
	"context"
	"fmt"

	"github.com/wovyr/wovyr/benchmark"
	"github.com/wovyr/wovyr/sandbox"
)

// clonesBench is `wovyr bench --clones`: on this node's microVM backend, a
// clone restored from the template's golden snapshot and run, against a
// cold one-shot VM of the same template, paired round by round (issue 17,
// ADR 0018). The golden is captured (or loaded) once, before the rounds.
func clonesBench(ctx context.Context, nd *node, n int) ([]benchmark.Row, error) {
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
	once := func(prepare func() (sandbox.Sandbox, error)) func() error {
		return func() error {
			sb, err := prepare()
			if err != nil {
				return err
			}
			defer sb.Destroy(ctx)
			return resultErr(sb.Run(ctx, inv))
		}
	}
	restore := once(func() (sandbox.Sandbox, error) { return b.Restore(ctx, g) })
	cold := once(func() (sandbox.Sandbox, error) { return b.Prepare(ctx, tmpl) })
	r, err := benchmark.Measure(benchmark.Pair{Name: "microvm clone: restore+run+destroy of /bin/true", Subject: restore,
		Peer: cold, PeerName: "cold one-shot VM"}, n, 1)
	if err != nil {
		return nil, err
	}
	return []benchmark.Row{r}, nil
}
