package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/wovyr/wovyr/benchmark"
	"github.com/wovyr/wovyr/sandbox"
)

// steadyRow is one backend under a steady arrival rate.
type steadyRow struct {
	backend       string
	n, failed     int
	p50, p99, max time.Duration
}

// steady sends rate requests per second of inv for dur, each on its own
// goroutine at its scheduled time (an open loop: a slow answer does not
// delay the next arrival), and returns the round-trip distribution.
func (d *benchDaemon) steady(ctx context.Context, backend string, inv *sandbox.Invocation, rate float64, dur time.Duration) (steadyRow, error) {
	if err := d.awaitWarm(ctx, backend, time.Minute); err != nil {
		return steadyRow{}, err
	}
	every := time.Duration(float64(time.Second) / rate)
	total := int(dur / every)
	var (
		mu     sync.Mutex
		rtts   []time.Duration
		failed int
		wg     sync.WaitGroup
	)
	start := time.Now()
	for i := range total {
		if wait := time.Until(start.Add(time.Duration(i) * every)); wait > 0 {
			select {
			case <-ctx.Done():
				return steadyRow{}, ctx.Err()
			case <-time.After(wait):
			}
		}
		wg.Go(func() {
			t := time.Now()
			err := d.submit(ctx, inv)
			rtt := time.Since(t)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				return
			}
			rtts = append(rtts, rtt)
		})
	}
	wg.Wait()
	r := steadyRow{backend: backend, n: total, failed: failed}
	if len(rtts) > 0 {
		r.p50, r.p99, r.max = benchmark.Quantile(rtts, 0.5), benchmark.Quantile(rtts, 0.99), benchmark.Quantile(rtts, 1)
	}
	return r, nil
}

func printSteady(out io.Writer, rows []steadyRow, rate float64, dur time.Duration) {
	tw := tabwriter.NewWriter(out, 0, 4, 1, ' ', 0)
	fmt.Fprintf(tw, "| backend (%.3g req/s for %s)\t| n\t| failed\t| p50\t| p99\t| max\t| p99/p50 |\n", rate, dur)
	fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|---\t|---\t|--- |")
	for _, r := range rows {
		ratio := 0.0
		if r.p50 > 0 {
			ratio = float64(r.p99) / float64(r.p50)
		}
		fmt.Fprintf(tw, "| %s\t| %d\t| %d\t| %s\t| %s\t| %s\t| %.2f |\n", r.backend, r.n, r.failed,
			r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond), r.max.Round(10*time.Microsecond), ratio)
	}
	tw.Flush()
}
