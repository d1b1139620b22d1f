package oci

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// Benchmarks measure side by side, in one run, wovyr against the raw runtime
// on an equivalent bundle (same spec, same template, no agent):
//
//	go test ./backend/oci -run '^$' -bench . -benchtime 20x
//
// Cold: Prepare+Run(/bin/true)+Destroy vs "<runtime> run". Warm: Run through
// the agent on a prepared sandbox vs "<runtime> exec" into a running one,
// split into claim (validation, limits) and the job's round trip.

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

func benchBackend(b testing.TB, gvisor, pooled bool) *Backend {
	cfg := testConfig(b)
	cfg.Pooled = pooled
	var be *Backend
	var err error
	if gvisor {
		be, err = NewGVisor(cfg)
	} else {
		be, err = NewContainer(cfg)
	}
	if err != nil {
		b.Fatal(err)
	}
	if c := be.Probe(context.Background()); !c.Available {
		b.Skip(c.Reason)
	}
	return be
}

// rawPeer is the raw runtime run of a bundle equivalent to a sandbox's
// (Peer).
func rawPeer(b testing.TB, be *Backend, argv []string) *Peer {
	p, err := be.NewPeer(context.Background(), "busybox", argv)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	return p
}

// rawRun times one run of the peer.
func rawRun(b *testing.B, p *Peer) time.Duration {
	start := time.Now()
	if err := p.Run(); err != nil {
		b.Fatalf("raw run: %v", err)
	}
	return time.Since(start)
}

func benchCold(b *testing.B, gvisor bool) {
	be := benchBackend(b, gvisor, false)
	ctx := context.Background()
	peer := rawPeer(b, be, []string{"/bin/true"})
	var ours, raw []time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		sb, err := be.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := sb.Run(ctx, cmd("/bin/true")); err != nil {
			b.Fatal(err)
		}
		if err := sb.Destroy(ctx); err != nil {
			b.Fatal(err)
		}
		ours = append(ours, time.Since(start))
		raw = append(raw, rawRun(b, peer))
	}
	mo, mr := median(ours), median(raw)
	b.ReportMetric(float64(mo.Microseconds())/1000, "wovyr-ms")
	b.ReportMetric(float64(mr.Microseconds())/1000, "raw-"+peer.Runtime()+"-ms")
	b.ReportMetric(float64(mo)/float64(mr), "ratio")
}

// warmIdle is how long a warm benchmark's sandbox waits before its claim.
const warmIdle = 100 * time.Millisecond

// benchWarm's sandboxes are prepared as a pool's are (Config.Pooled) and
// claimed after warmIdle.
func benchWarm(b *testing.B, gvisor bool) {
	be := benchBackend(b, gvisor, true)
	ctx := context.Background()
	d, _ := be.chosen(ctx)
	var ours, raw, claim, job []time.Duration
	for i := 0; i < b.N; i++ {
		sb, err := be.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
		if err != nil {
			b.Fatal(err)
		}
		// A pooled sandbox waits for its claim: an idle gVisor sandbox's
		// first exec is slower than one right after Prepare (cpus.go).
		time.Sleep(warmIdle)
		start := time.Now()
		res, err := sb.Run(ctx, cmd("/bin/true"))
		if err != nil {
			b.Fatal(err)
		}
		ours = append(ours, time.Since(start))
		// Before Started: validation and claim; from it to Finished: the
		// job's round trip through the agent (fork/exec of /bin/true).
		claim = append(claim, res.Timings.Started.Sub(start))
		job = append(job, res.Timings.Finished.Sub(res.Timings.Started))
		ex := d.command("exec", sb.(*Sandbox).id, "/bin/true")
		start = time.Now()
		if out, err := ex.CombinedOutput(); err != nil {
			b.Fatalf("raw exec: %v: %s", err, out)
		}
		raw = append(raw, time.Since(start))
		if err := sb.Destroy(ctx); err != nil {
			b.Fatal(err)
		}
	}
	mo, mr := median(ours), median(raw)
	b.ReportMetric(float64(mo.Microseconds())/1000, "wovyr-warm-ms")
	// The best of the run: what a quiet machine approaches.
	b.ReportMetric(float64(slices.Min(ours).Microseconds())/1000, "wovyr-warm-min-ms")
	b.ReportMetric(float64(median(claim).Microseconds())/1000, "claim-ms")
	b.ReportMetric(float64(median(job).Microseconds())/1000, "job-ms")
	b.ReportMetric(float64(mr.Microseconds())/1000, "raw-"+d.name+"-exec-ms")
	b.ReportMetric(float64(mo)/float64(mr), "ratio")
}

func BenchmarkColdContainer(b *testing.B) { benchCold(b, false) }
func BenchmarkColdGVisor(b *testing.B)    { benchCold(b, true) }
func BenchmarkWarmContainer(b *testing.B) { benchWarm(b, false) }
func BenchmarkWarmGVisor(b *testing.B)    { benchWarm(b, true) }
