package server_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// loadN is how many invocations each load round submits at once.
const loadN = 1000

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkServeLoad is the bounded load run: rounds of loadN concurrent
// submissions of a trivial native tool (/bin/true) through the daemon on
// loopback, and of the same tool through the in-process path (manager.Run
// under the same concurrency bound), measured side by side in one run; then
// one at a time, both ways, interleaved. Every daemon submission must end
// done with exit 0, with exactly one record each. Run with -benchtime=1x.
func BenchmarkServeLoad(b *testing.B) {
	cfg := testConfig()
	for i := range cfg.Tenants {
		cfg.Tenants[i].Rate, cfg.Tenants[i].Burst, cfg.Tenants[i].MaxPending = 1e9, 1<<30, 1<<30
	}
	cfg.Concurrency = config.Default().Concurrency
	h := newHarness(b, cfg, "")
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: loadN, MaxConnsPerHost: 0}}
	alice := client.New(h.url, aliceToken, hc)
	ctx := context.Background()

	daemonOne := func() (time.Duration, string, error) {
		start := time.Now()
		rec, err := alice.Submit(ctx, command("/bin/true"), time.Minute)
		for err == nil && !client.Terminal(rec.State) {
			rec, err = alice.Get(ctx, rec.ID, time.Minute)
		}
		if err == nil && (rec.State != client.StateDone || rec.Result.ExitCode != 0 || rec.Result.Class != sandbox.OK) {
			b.Errorf("daemon run %s: %s %+v", rec.ID, rec.State, rec.Result)
		}
		return time.Since(start), rec.ID, err
	}
	sem := make(chan struct{}, cfg.Concurrency)
	inprocOne := func() (time.Duration, error) {
		start := time.Now()
		sem <- struct{}{}
		defer func() { <-sem }()
		inv := command("/bin/true")
		inv.Tenant = "alice"
		res, err := h.mgr.Run(ctx, inv)
		if err == nil && (res.ExitCode != 0 || res.Class != sandbox.OK) {
			b.Errorf("in-process run: %+v", res)
		}
		return time.Since(start), err
	}
	// cpu is this process's CPU time (user+system, kernel work for the
	// sandboxes included): unlike wall time, it does not depend on what
	// else the shared machine runs.
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var dCPU, iCPU time.Duration
	round := func(one func() (time.Duration, error)) ([]time.Duration, time.Duration) {
		lat := make([]time.Duration, loadN)
		var wg sync.WaitGroup
		start := time.Now()
		gate := make(chan struct{})
		for i := range loadN {
			wg.Go(func() {
				<-gate
				d, err := one()
				if err != nil {
					b.Error(err)
				}
				lat[i] = d
			})
		}
		close(gate) // release all at once
		wg.Wait()
		return lat, time.Since(start)
	}

	for b.Loop() {
		// Two rounds each way, in the order daemon, in-process, in-process,
		// daemon, so that drift in this shared machine's load falls on both.
		var mu sync.Mutex
		ids := map[string]int{}
		daemonRound := func() (time.Duration, error) {
			d, id, err := daemonOne()
			mu.Lock()
			ids[id]++
			mu.Unlock()
			return d, err
		}
		var dLat, iLat []time.Duration
		var dWall, iWall time.Duration
		for _, daemon := range []bool{true, false, false, true} {
			c0 := cpu()
			if daemon {
				lat, wall := round(daemonRound)
				dLat, dWall, dCPU = append(dLat, lat...), dWall+wall, dCPU+cpu()-c0
			} else {
				lat, wall := round(inprocOne)
				iLat, iWall, iCPU = append(iLat, lat...), iWall+wall, iCPU+cpu()-c0
			}
		}
		if b.Failed() {
			b.FailNow()
		}
		// No lost, no duplicated record: loadN distinct ids, each recorded
		// once, done.
		if len(ids) != 2*loadN {
			b.Fatalf("%d distinct ids for %d submissions", len(ids), 2*loadN)
		}
		found := 0
		err := h.store.Each(func(rec store.Invocation) error {
			if _, ok := ids[rec.ID]; ok {
				found++
				if rec.State != store.Done || rec.Result.ExitCode != 0 || len(rec.Transitions) != 3 {
					b.Errorf("record %s: %s %v", rec.ID, rec.State, rec.Transitions)
				}
			}
			return nil
		})
		if err != nil || found != 2*loadN {
			b.Fatalf("%d of %d records found (%v)", found, 2*loadN, err)
		}
		// One at a time: per-invocation overhead without queueing.
		const seqN = 50
		var dSeq, iSeq []time.Duration
		for range seqN {
			d, _, err := daemonOne()
			if err != nil {
				b.Fatal(err)
			}
			dSeq = append(dSeq, d)
			d, err = inprocOne()
			if err != nil {
				b.Fatal(err)
			}
			iSeq = append(iSeq, d)
		}
		b.ReportMetric(float64(2*loadN)/dWall.Seconds(), "daemon_inv/s")
		b.ReportMetric(float64(2*loadN)/iWall.Seconds(), "inproc_inv/s")
		b.ReportMetric(msf(dCPU)/(2*loadN), "daemon_cpu_ms/inv")
		b.ReportMetric(msf(iCPU)/(2*loadN), "inproc_cpu_ms/inv")
		b.ReportMetric(msf(percentile(dLat, 0.5)), "daemon_p50_ms")
		b.ReportMetric(msf(percentile(dLat, 0.99)), "daemon_p99_ms")
		b.ReportMetric(msf(percentile(iLat, 0.5)), "inproc_p50_ms")
		b.ReportMetric(msf(percentile(iLat, 0.99)), "inproc_p99_ms")
		b.ReportMetric(float64(percentile(dLat, 0.5))/float64(percentile(iLat, 0.5)), "p50_ratio")
		b.ReportMetric(msf(percentile(dSeq, 0.5)), "seq_daemon_p50_ms")
		b.ReportMetric(msf(percentile(dSeq, 0.99)), "seq_daemon_p99_ms")
		b.ReportMetric(msf(percentile(iSeq, 0.5)), "seq_inproc_p50_ms")
		b.ReportMetric(msf(percentile(iSeq, 0.99)), "seq_inproc_p99_ms")
		b.ReportMetric(float64(percentile(dSeq, 0.5))/float64(percentile(iSeq, 0.5)), "seq_p50_ratio")
	}
}
