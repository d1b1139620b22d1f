package native

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/wovyr/wovyr/benchmark"
	"github.com/wovyr/wovyr/sandbox"
)

// BenchmarkNativeRun measures a run of /bin/true on a prepared sandbox and
// the full prepare+run+destroy, each interleaved with os/exec of /bin/true
// (the floor), and reports medians and the ratio.
func BenchmarkNativeRun(b *testing.B) {
	bk := newBackend(b)
	ctx := context.Background()
	inv := &sandbox.Invocation{Tenant: "bench", Policy: sandbox.Policy{Trust: sandbox.Trusted},
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/true"}}}
	raw := func() error { return exec.Command("/bin/true").Run() }
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"prepared", nil},
		{"cold", func() error {
			sb, err := bk.Prepare(ctx, sandbox.Template{})
			if err != nil {
				return err
			}
			defer sb.Destroy(ctx)
			_, err = sb.Run(ctx, inv)
			return err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			run, pair := c.run, benchmark.Pair{Name: c.name, Peer: raw}
			if run == nil {
				// Prepared ahead, as a pool of 16 holds them.
				warm := benchmark.NewWarm(ctx, bk, sandbox.Template{}, 16)
				defer warm.Close()
				run = func() error {
					_, err := warm.Take().Run(ctx, inv)
					return err
				}
				pair.Setup = warm.Refill
			}
			pair.Subject = run
			b.ResetTimer()
			row, err := benchmark.Measure(pair, b.N, 0)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(row.Subject)/float64(time.Microsecond), "wovyr-p50-µs")
			b.ReportMetric(float64(row.Peer)/float64(time.Microsecond), "exec-p50-µs")
			b.ReportMetric(row.Ratio, "ratio")
		})
	}
}
