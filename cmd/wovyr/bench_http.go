package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/wovyr/wovyr/benchmark"
	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/manager"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/server"
)

// httpBench measures the daemon path as a client feels it: `wovyr serve`
// started as its own process (default pools, one tenant), a request per
// round — POST /v1/invocations?wait of /bin/true (a trivial module on
// wasm) on each certified backend — paired in one run with the same claim
// in-process from a pool made as the daemon's (peerPool). Before each
// round, untimed, both sides have a warm sandbox: the daemon's pool is
// polled through /readyz, so the rows compare warm claims with warm claims.
// With load.Rate > 0 it then sends that many requests per second to each
// backend (steady) and reports the latency distribution and the cold
// claims (what refill and commits do to the tail).
func httpBench(ctx context.Context, g *globals, only string, n int, load steadyLoad, out io.Writer) error {
	// The in-process side: the daemon's own configuration (pooled), probed
	// before the daemon holds the store.
	nd, err := newNode(g, g.logger(), nodeOptions{pooled: true})
	if err != nil {
		return err
	}
	defer nd.Close()
	certs, probes, err := nd.readState()
	if err != nil {
		return err
	}
	if nd.mgr, err = manager.New(manager.Config{Backends: nd.backends, Certs: certs, Probes: probes, Logger: nd.log}); err != nil {
		return err
	}
	sts := nd.mgr.Detect(ctx, false)
	d, err := startBenchDaemon(ctx, g)
	if err != nil {
		return err
	}
	defer d.stop()
	var rows []benchmark.Row
	var steady []steadyRow
	var failed []string
	for _, st := range sts {
		if only != "" && st.Name != only {
			continue
		}
		if !st.Capability.Available || !st.Certified {
			fmt.Fprintf(os.Stderr, "wovyr: bench --http: skipping %s (available %v, certified %v)\n", st.Name, st.Capability.Available, st.Certified)
			continue
		}
		b, _ := nd.mgr.Backend(st.Name)
		inv := benchInvocation(st.Kinds[0], b.Strength())
		peer, err := startPeerPool(ctx, nd.mgr, b, manager.TemplateFor(inv))
		if err != nil {
			fmt.Fprintf(os.Stderr, "wovyr: bench --http: %s: %v\n", st.Name, err)
			failed = append(failed, st.Name)
			continue
		}
		r, err := benchmark.Measure(benchmark.Pair{
			Name:     "POST /v1/invocations?wait " + st.Name,
			PeerName: "in-process pool claim",
			Setup: func() error {
				if err := peer.awaitWarm(ctx, time.Minute); err != nil {
					return err
				}
				return d.awaitWarm(ctx, st.Name, time.Minute)
			},
			Subject: func() error { _, err := d.submit(ctx, inv); return err },
			Peer:    func() error { return peer.claim(ctx, inv) },
		}, n, 2)
		if cerr := peer.close(ctx); err == nil {
			err = cerr
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "wovyr: bench --http: %s: %v\n", st.Name, d.withLog(err))
			failed = append(failed, st.Name)
			continue
		}
		rows = append(rows, r)
		if load.Rate > 0 {
			s, err := d.steady(ctx, st.Name, inv, load)
			if err != nil {
				return d.withLog(err)
			}
			steady = append(steady, s)
		}
	}
	benchmark.Print(out, rows)
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 1, ' ', 0)
	fmt.Fprintln(tw, "| case\t| round trip p50 − in-process p50 |")
	fmt.Fprintln(tw, "|---\t|--- |")
	for _, r := range rows {
		fmt.Fprintf(tw, "| %s\t| %+.2f ms |\n", r.Name, float64(r.Subject-r.Peer)/float64(time.Millisecond))
	}
	tw.Flush()
	if len(rows) > 0 {
		fmt.Fprintln(out)
		var names []string
		for _, st := range sts {
			if only == "" || st.Name == only {
				names = append(names, st.Name)
			}
		}
		if err := d.printPhases(out, names); err != nil {
			return err
		}
	}
	if len(steady) > 0 {
		fmt.Fprintln(out)
		printSteady(out, steady, load)
	}
	if len(failed) > 0 {
		return fmt.Errorf("failed on %s", strings.Join(failed, ", "))
	}
	return nil
}

// benchInvocation is /bin/true, or a trivial module, pinned to strength s.
func benchInvocation(kind sandbox.WorkloadKind, s sandbox.Strength) *sandbox.Invocation {
	inv := &sandbox.Invocation{Tenant: "bench", Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/true"}},
		Policy: sandbox.Policy{Trust: sandbox.Trusted, Preference: s}}
	if kind == sandbox.KindWasm {
		inv.Workload = sandbox.Workload{Kind: sandbox.KindWasm, Module: trivialWasm, Argv: []string{"true.wasm"}}
	}
	return inv
}

// benchDaemon is a `wovyr serve` child process for a benchmark.
type benchDaemon struct {
	cmd  *exec.Cmd
	dir  string
	url  string
	api  *client.Client
	done chan error
}

// startBenchDaemon starts `wovyr serve` on a free loopback port with one admin
// tenant and waits until /readyz is 200 (its default pools warm).
func startBenchDaemon(ctx context.Context, g *globals) (*benchDaemon, error) {
	dir, err := os.MkdirTemp("", "wovyr-bench-http-")
	if err != nil {
		return nil, err
	}
	var tok [16]byte
	rand.Read(tok[:])
	token := hex.EncodeToString(tok[:])
	cfg := config.Config{Tenants: []config.Tenant{{Name: "bench", Admin: true, TokenSHA256: []string{config.HashToken(token)}, Rate: 1e6, Burst: 1e6}}}
	js, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "serve.json"), js, 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	addrFile := filepath.Join(dir, "addr")
	cmd := exec.Command(self, "--state-dir", g.stateDir, "--guest", g.guest, "--container-runtime", g.containerRuntime,
		"serve", "--config", filepath.Join(dir, "serve.json"), "--listen", "127.0.0.1:0", "--addr-file", addrFile)
	logf, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	d := &benchDaemon{cmd: cmd, dir: dir, done: make(chan error, 1)}
	go func() { d.done <- cmd.Wait(); logf.Close() }()
	start := time.Now()
	for {
		if b, err := os.ReadFile(addrFile); err == nil && d.url == "" {
			d.url = "http://" + strings.TrimSpace(string(b))
			d.api = client.New(d.url, token, nil)
		}
		if d.url != "" {
			if resp, err := http.Get(d.url + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					fmt.Fprintf(os.Stderr, "wovyr: bench --http: daemon ready in %s\n", time.Since(start).Round(time.Millisecond))
					return d, nil
				}
			}
		}
		select {
		case err := <-d.done:
			log, _ := os.ReadFile(filepath.Join(dir, "serve.log"))
			os.RemoveAll(dir)
			return nil, fmt.Errorf("wovyr serve exited (%v): %s", err, lastLines(string(log), 5))
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			d.stop()
			return nil, ctx.Err()
		}
	}
}

// stop ends the daemon (SIGTERM, its graceful shutdown) and removes its
// files.
func (d *benchDaemon) stop() {
	d.cmd.Process.Signal(os.Interrupt)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		d.cmd.Process.Kill()
		<-d.done
	}
	os.RemoveAll(d.dir)
}

// submit runs inv through the API and waits for its result; it returns
// the invocation's id.
func (d *benchDaemon) submit(ctx context.Context, inv *sandbox.Invocation) (string, error) {
	rec, err := d.api.Submit(ctx, inv, time.Minute)
	if err != nil {
		return "", err
	}
	if rec.Result == nil {
		return rec.ID, fmt.Errorf("invocation %s is %s after a minute", rec.ID, rec.State)
	}
	return rec.ID, resultErr(rec.Result, nil)
}

// awaitWarm waits until the daemon's default pool of backend holds a warm
// sandbox.
func (d *benchDaemon) awaitWarm(ctx context.Context, backend string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		resp, err := http.Get(d.url + "/readyz")
		if err != nil {
			return err
		}
		var r struct{ Pools []server.PoolWarmth }
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if err != nil {
			return err
		}
		for _, p := range r.Pools {
			if p.Backend == backend && p.Warm >= 1 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return errors.New(backend + ": the daemon's pool did not refill within " + limit.String())
}

// withLog adds the end of the daemon's log to err: a tenant-facing error
// says only that the node failed.
func (d *benchDaemon) withLog(err error) error {
	log, _ := os.ReadFile(filepath.Join(d.dir, "serve.log"))
	return fmt.Errorf("%w\nthe daemon's log ends:\n%s", err, lastLines(string(log), 8))
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(ls[max(0, len(ls)-n):], "\n")
}
