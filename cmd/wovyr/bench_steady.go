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

// steadyLoad is bench --http's steady arrival rate: Rate requests per
// second, for LeadIn unmeasured (the pools see the rate before it is
// measured, as under a load that has run a while), then for Duration.
type steadyLoad struct {
	Rate             float64
	LeadIn, Duration time.Duration
}

// steadyRow is one backend under a steady arrival rate.
type steadyRow struct {
	backend       string
	n, failed     int
	cold          int // measured requests whose claim found no warm sandbox
	p50, p99, max time.Duration
}

// coldAcquire is the acquire time above which a claim was not warm: a warm
// claim takes microseconds, the cheapest prepare (native) a millisecond.
const coldAcquire = time.Millisecond

// steady sends load's requests of inv, each on its own goroutine at its
// scheduled time (an open loop: a slow answer does not delay the next
// arrival), and returns the round-trip distribution of those sent after
// the lead-in, and how many of them the daemon's log says claimed cold.
func (d *benchDaemon) steady(ctx context.Context, backend string, inv *sandbox.Invocation, load steadyLoad) (steadyRow, error) {
	if err := d.awaitWarm(ctx, backend, time.Minute); err != nil {
		return steadyRow{}, err
	}
	every := time.Duration(float64(time.Second) / load.Rate)
	lead, total := int(load.LeadIn/every), int((load.LeadIn+load.Duration)/every)
	var (
		mu     sync.Mutex
		rtts   []time.Duration
		ids    []string
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
			id, err := d.submit(ctx, inv)
			rtt := time.Since(t)
			if i < lead {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				return
			}
			rtts, ids = append(rtts, rtt), append(ids, id)
		})
	}
	wg.Wait()
	r := steadyRow{backend: backend, n: total - lead, failed: failed}
	if len(rtts) > 0 {
		r.p50, r.p99, r.max = benchmark.Quantile(rtts, 0.5), benchmark.Quantile(rtts, 0.99), benchmark.Quantile(rtts, 1)
	}
	acquired, err := d.acquireTimes(ids, 5*time.Second)
	if err != nil {
		return r, fmt.Errorf("%s: %w", backend, err)
	}
	for _, a := range acquired {
		if a >= coldAcquire {
			r.cold++
		}
	}
	return r, nil
}

// acquireTimes reads the acquire time (prepare_ms) of each of ids from the
// daemon's invocation log lines, waiting up to within for the last of them:
// the daemon logs an invocation as it finishes, around its response.
func (d *benchDaemon) acquireTimes(ids []string, within time.Duration) ([]time.Duration, error) {
	deadline := time.Now().Add(within)
	for {
		byID := map[string]time.Duration{}
		err := d.invocationLines(func(line map[string]any) {
			id, _ := line["id"].(string)
			if ms, ok := line["prepare_ms"].(float64); ok {
				byID[id] = time.Duration(ms * float64(time.Millisecond))
			}
		})
		if err != nil {
			return nil, err
		}
		out := make([]time.Duration, 0, len(ids))
		for _, id := range ids {
			if a, ok := byID[id]; ok {
				out = append(out, a)
			}
		}
		if len(out) == len(ids) {
			return out, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d invocations have no log line", len(ids)-len(out), len(ids))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func printSteady(out io.Writer, rows []steadyRow, load steadyLoad) {
	tw := tabwriter.NewWriter(out, 0, 4, 1, ' ', 0)
	head := fmt.Sprintf("%.3g req/s for %s", load.Rate, load.Duration)
	if load.LeadIn > 0 {
		head += fmt.Sprintf(" after %s at that rate", load.LeadIn)
	}
	fmt.Fprintf(tw, "| backend (%s)\t| n\t| failed\t| cold\t| p50\t| p99\t| max\t| p99/p50 |\n", head)
	fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|---\t|---\t|---\t|--- |")
	for _, r := range rows {
		ratio := 0.0
		if r.p50 > 0 {
			ratio = float64(r.p99) / float64(r.p50)
		}
		fmt.Fprintf(tw, "| %s\t| %d\t| %d\t| %d\t| %s\t| %s\t| %s\t| %.2f |\n", r.backend, r.n, r.failed, r.cold,
			r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond), r.max.Round(10*time.Microsecond), ratio)
	}
	tw.Flush()
}
