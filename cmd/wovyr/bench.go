package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/wovyr/wovyr/benchmark"
	"github.com/wovyr/wovyr/sandbox"
)

// benchMain is `wovyr bench`: wovyr's paths next to their raw peers,
// measured interleaved in one run.
func benchMain(ctx context.Context, g *globals, args []string) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	n := fs.Int("n", 300, "paired rounds per case (--cli: 20)")
	cli := fs.Bool("cli", false, "measure whole wovyr processes (run on each backend, backends) against the raw peers' own command lines")
	httpPath := fs.Bool("http", false, "measure the daemon path (wovyr serve as a process, one request per round) against the in-process warm claim of each certified backend (-n default 20)")
	rate := fs.Float64("rate", 0, "with --http: then send this many requests per second to each backend")
	dur := fs.Duration("duration", 60*time.Second, "with --http --rate: for this long per backend")
	leadIn := fs.Duration("lead-in", 0, "with --http --rate: first send at the rate for this long, unmeasured, so the pools have seen the rate")
	only := fs.String("backend", "", "with --http: this backend only")
	clones := fs.Bool("clones", false, "measure microVM and gVisor clones restored from the template's golden snapshot (and a gVisor warm pool's claim) against cold one-shot sandboxes (-n default 5)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if code := refuseUnlessRoot("wovyr bench"); code != 0 {
		return code
	}
	nd, code := mustNode(g)
	if nd == nil {
		return code
	}
	defer nd.Close()
	rounds := 20
	if *clones {
		rounds = 5
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "n" {
			rounds = *n
		}
	})
	if *httpPath {
		nd.Close() // the daemon and the pooled node below hold what they need
		if err := httpBench(ctx, g, *only, rounds, steadyLoad{Rate: *rate, LeadIn: *leadIn, Duration: *dur}, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "wovyr: bench --http:", err)
			return exitBackendFailure
		}
		return 0
	}
	if *clones {
		rows, err := clonesBench(ctx, nd, rounds)
		if err != nil {
			fmt.Fprintln(os.Stderr, "wovyr: bench --clones:", err)
			return exitBackendFailure
		}
		benchmark.Print(os.Stdout, rows)
		return 0
	}
	if *cli {
		if err := cliBench(ctx, g, nd, rounds, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "wovyr: bench --cli:", err)
			return exitBackendFailure
		}
		return 0
	}
	rows, err := nativeBench(ctx, nd, *n)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wovyr: bench:", err)
		return exitBackendFailure
	}
	benchmark.Print(os.Stdout, rows)
	return 0
}

// benchPoolSize is how many sandboxes the prepared case holds ready, as a
// warm pool of that size would.
const benchPoolSize = 16

func nativeBench(ctx context.Context, nd *node, n int) ([]benchmark.Row, error) {
	b := nd.native
	inv := &sandbox.Invocation{Tenant: "bench", Policy: sandbox.Policy{Trust: sandbox.Trusted},
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/true"}}}
	rawTrue := func() error { return exec.Command("/bin/true").Run() }
	// Prepared ahead, as a pool holds them (benchmark.Warm): the run is what
	// an invocation waits for.
	warm := benchmark.NewWarm(ctx, b, sandbox.Template{Kind: sandbox.KindCommand}, benchPoolSize)
	defer warm.Close()
	prepared := func() error { return resultErr(warm.Take().Run(ctx, inv)) }
	cold := func() error {
		sb, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
		if err != nil {
			return err
		}
		defer sb.Destroy(ctx)
		return resultErr(sb.Run(ctx, inv))
	}
	var rows []benchmark.Row
	for _, p := range []benchmark.Pair{
		{Name: "native run of /bin/true (prepared sandbox)", Subject: prepared, Peer: rawTrue, PeerName: "os/exec /bin/true", Setup: warm.Refill},
		{Name: "native cold: prepare+run+destroy", Subject: cold, Peer: rawTrue, PeerName: "os/exec /bin/true"},
	} {
		r, err := benchmark.Measure(p, n, 10)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// resultErr is err, or why res is not a clean zero exit.
func resultErr(res *sandbox.Result, err error) error {
	if err != nil {
		return err
	}
	if res.Class != sandbox.OK || res.ExitCode != 0 {
		return fmt.Errorf("class %q exit %d: %s", res.Class, res.ExitCode, res.Error)
	}
	return nil
}
