// Package benchmark measures wovyr against its raw peers the way
// DESIGN.md §8 asks: paired, interleaved runs in one process (so machine
// noise hits both sides alike), reported as medians and the ratio of
// medians. It is used by `wovyr bench` and by Go benchmarks.
package benchmark

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

// Pair is one comparison: Subject is wovyr's path, Peer the raw floor.
type Pair struct {
	Name    string
	Subject func() error
	Peer    func() error
	// PeerName describes the peer, e.g. "os/exec /bin/true".
	PeerName string
	// Setup, if set, runs before every round (one Subject and one Peer
	// call, warm-up rounds included), untimed: Warm.Refill.
	Setup func() error
}

// Row is a measured pair.
type Row struct {
	Name, PeerName      string
	N                   int
	Subject, Peer       time.Duration // medians
	SubjectP99, PeerP99 time.Duration
	Ratio               float64 // Subject / Peer medians
}

// Measure runs warmup unmeasured rounds, then n rounds alternating which
// side goes first, and returns the medians.
func Measure(p Pair, n, warmup int) (Row, error) {
	for range warmup {
		if err := setup(p); err != nil {
			return Row{}, err
		}
		if err := p.Subject(); err != nil {
			return Row{}, fmt.Errorf("%s: %w", p.Name, err)
		}
		if err := p.Peer(); err != nil {
			return Row{}, fmt.Errorf("%s peer: %w", p.Name, err)
		}
	}
	subj := make([]time.Duration, 0, n)
	peer := make([]time.Duration, 0, n)
	timeIt := func(f func() error, into *[]time.Duration) error {
		t := time.Now()
		err := f()
		*into = append(*into, time.Since(t))
		return err
	}
	for i := range n {
		if err := setup(p); err != nil {
			return Row{}, err
		}
		first, second := p.Subject, p.Peer
		fi, si := &subj, &peer
		if i%2 == 1 {
			first, second, fi, si = p.Peer, p.Subject, &peer, &subj
		}
		if err := timeIt(first, fi); err != nil {
			return Row{}, fmt.Errorf("%s: %w", p.Name, err)
		}
		if err := timeIt(second, si); err != nil {
			return Row{}, fmt.Errorf("%s: %w", p.Name, err)
		}
	}
	r := Row{Name: p.Name, PeerName: p.PeerName, N: n,
		Subject: Quantile(subj, 0.5), Peer: Quantile(peer, 0.5),
		SubjectP99: Quantile(subj, 0.99), PeerP99: Quantile(peer, 0.99)}
	r.Ratio = float64(r.Subject) / float64(r.Peer)
	return r, nil
}

func setup(p Pair) error {
	if p.Setup == nil {
		return nil
	}
	if err := p.Setup(); err != nil {
		return fmt.Errorf("%s setup: %w", p.Name, err)
	}
	return nil
}

// Quantile returns the q-quantile (nearest rank) of ds.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s)-1) + 0.5)
	return s[i]
}

// Print writes rows as a Markdown table.
func Print(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	fmt.Fprintln(tw, "| case\t| n\t| wovyr p50\t| wovyr p99\t| peer\t| peer p50\t| peer p99\t| ratio p50 |")
	fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|---\t|---\t|---\t|--- |")
	for _, r := range rows {
		fmt.Fprintf(tw, "| %s\t| %d\t| %s\t| %s\t| %s\t| %s\t| %s\t| %.2f× |\n", r.Name, r.N, round(r.Subject), round(r.SubjectP99),
			r.PeerName, round(r.Peer), round(r.PeerP99), r.Ratio)
	}
	tw.Flush()
}

func round(d time.Duration) time.Duration {
	switch {
	case d > time.Millisecond:
		return d.Round(10 * time.Microsecond)
	case d > time.Microsecond:
		return d.Round(100 * time.Nanosecond)
	}
	return d
}
