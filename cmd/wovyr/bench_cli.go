package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"text/tabwriter"

	"github.com/wovyr/wovyr/benchmark"
)

// trivialWasm is a WASI command whose _start returns at once.
var trivialWasm = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
	0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type: () -> ()
	0x03, 0x02, 0x01, 0x00, // one function of that type
	0x05, 0x03, 0x01, 0x00, 0x01, // one memory, one page
	0x07, 0x13, 0x02, // two exports:
	0x06, 'm', 'e', 'm', 'o', 'r', 'y', 0x02, 0x00,
	0x06, '_', 's', 't', 'a', 'r', 't', 0x00, 0x00,
	0x0a, 0x04, 0x01, 0x02, 0x00, 0x0b, // its body: end
}

// cliCase is one whole-process comparison and the subject's peak RSS.
type cliCase struct {
	pair benchmark.Pair
	rss  []int64 // the subject's peak RSS per round, KiB
}

// cliBench measures what a user who shells out feels: each wovyr command
// as a whole process next to its raw peer's own command line, interleaved
// in one run (benchmark.Measure).
func cliBench(ctx context.Context, g *globals, nd *node, n int, out io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "wovyr-bench-cli-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	mod := filepath.Join(tmp, "true.wasm")
	if err := os.WriteFile(mod, trivialWasm, 0o644); err != nil {
		return err
	}
	wovyr := func(args ...string) []string {
		return append([]string{self, "--state-dir", g.stateDir, "--guest", g.guest, "--container-runtime", g.containerRuntime}, args...)
	}
	var cases []*cliCase
	add := func(name string, subject []string, peerName string, peer func() error) {
		c := &cliCase{}
		c.pair = benchmark.Pair{Name: name, PeerName: peerName, Peer: peer,
			Subject: func() error { return runProcess(subject, &c.rss) }}
		cases = append(cases, c)
	}
	add("wovyr run --trust trusted -- /bin/true", wovyr("run", "--trust", "trusted", "--", "/bin/true"),
		"/bin/true", func() error { return runProcess([]string{"/bin/true"}, nil) })
	add("wovyr run --wasm (cached module)", wovyr("run", "--wasm", mod, "--", mod),
		"wovyr wasm-exec (bare Wasmtime, cached)", func() error {
			return runProcess([]string{self, "wasm-exec", "-state", filepath.Join(tmp, "wasm-state"), mod}, nil)
		})
	for _, b := range nd.oci {
		if c := nd.mgr.Probe(ctx, b); !c.Available {
			fmt.Fprintf(os.Stderr, "wovyr: bench: %s unavailable: %s\n", b.Name(), c.Reason)
			continue
		}
		peer, err := b.NewPeer(ctx, "busybox", []string{"/bin/true"})
		if err != nil {
			fmt.Fprintf(os.Stderr, "wovyr: bench: no %s peer: %v\n", b.Name(), err)
			continue
		}
		defer peer.Close()
		add("wovyr run --backend "+b.Name()+" -- /bin/true", wovyr("run", "--backend", b.Name(), "--", "/bin/true"),
			peer.Runtime()+" run (bundle of the same spec)", peer.Run)
	}
	add("wovyr backends (stored probes)", wovyr("backends"),
		"/bin/true", func() error { return runProcess([]string{"/bin/true"}, nil) })

	var rows []benchmark.Row
	for _, c := range cases {
		r, err := benchmark.Measure(c.pair, n, 3)
		if err != nil {
			return err
		}
		rows = append(rows, r)
	}
	benchmark.Print(out, rows)
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 1, ' ', 0)
	fmt.Fprintln(tw, "| case\t| wovyr peak RSS p50\t| max |")
	fmt.Fprintln(tw, "|---\t|---\t|--- |")
	for _, c := range cases {
		fmt.Fprintf(tw, "| %s\t| %.1f MiB\t| %.1f MiB |\n", c.pair.Name, float64(median(c.rss))/1024, float64(slices.Max(c.rss))/1024)
	}
	return tw.Flush()
}

// runProcess runs argv to a zero exit, its output discarded, and appends
// its peak RSS (KiB) to rss if rss is not nil.
func runProcess(argv []string, rss *[]int64) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%v: %w", argv, err)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && rss != nil {
		*rss = append(*rss, ru.Maxrss)
	}
	return nil
}

// median is the upper median of v, zero for none.
func median[T cmp.Ordered](v []T) T {
	var zero T
	if len(v) == 0 {
		return zero
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
