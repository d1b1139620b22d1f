package oci

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/wovyr/wovyr/egress/egresstest"
	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/sandbox"
)

// BenchmarkEgressClaim measures, side by side in one run, a warm container
// sandbox's Run of /bin/true (claim + job) without an egress service, in a
// slot with a deny-all policy, and in a slot with the truth table's
// allowlist; and Prepare with and without a slot. Prepare and Destroy are
// outside the Run timings.
//
//	go test -run '^$' -bench EgressClaim -benchtime 20x ./backend/oci
func BenchmarkEgressClaim(b *testing.B) {
	r := newEgressRig(b, "obb")
	cfg := testConfig(b)
	cfg.Pooled = true // warm: the container runs from Prepare on
	plain, err := NewContainer(cfg)
	if err != nil {
		b.Fatal(err)
	}
	cfg = r.b.cfg
	cfg.Pooled = true
	if r.b, err = NewContainer(cfg); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	cases := []struct {
		name string
		be   *Backend
		p    netpolicy.Policy
	}{
		{"no-service", plain, netpolicy.Policy{}},
		{"slot-deny-all", r.b, netpolicy.Policy{}},
		{"slot-allowlist", r.b, egresstest.TenantPolicy},
	}
	runs := make([][]time.Duration, len(cases))
	preps := make([][]time.Duration, len(cases))
	for i := 0; i < b.N; i++ {
		for ci, c := range cases {
			t0 := time.Now()
			sb, err := c.be.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand, Image: "busybox"})
			if err != nil {
				b.Fatal(err)
			}
			preps[ci] = append(preps[ci], time.Since(t0))
			inv := cmd("/bin/true")
			inv.Workload.Image = "busybox"
			inv.Policy.Network = c.p
			t1 := time.Now()
			res, err := sb.Run(ctx, inv)
			runs[ci] = append(runs[ci], time.Since(t1))
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("%s: %v %+v", c.name, err, res)
			}
			if err := sb.Destroy(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	for ci, c := range cases {
		b.ReportMetric(egressMS(egressMedian(runs[ci])), "run-"+c.name+"-p50-ms")
		b.ReportMetric(egressMS(egressMedian(preps[ci])), "prepare-"+c.name+"-p50-ms")
	}
	b.ReportMetric(egressMedian(runs[2]).Seconds()/egressMedian(runs[0]).Seconds(), "run-allowlist/no-service")
}

func egressMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// egressMedian is the median of a copy of ds.
func egressMedian(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkGVisorEgress measures, side by side in one run, what a gVisor
// invocation costs from Prepare to its result (/bin/true, one-shot): with
// --network=none under a deny-all policy, and with netstack in an egress
// slot under the truth table's allowlist (ADR 0009), which binds the slot
// and then starts runsc in it.
//
//	go test -run '^$' -bench GVisorEgress -benchtime 20x ./backend/oci
func BenchmarkGVisorEgress(b *testing.B) {
	r := newEgressRig(b, "ogx")
	g := gvisorIn(b, r)
	ctx := context.Background()
	cases := []struct {
		name string
		tmpl sandbox.Template
		p    netpolicy.Policy
	}{
		{"none-deny-all", sandbox.Template{Kind: sandbox.KindCommand, Image: "busybox"}, netpolicy.Policy{}},
		{"netstack-allowlist", sandbox.Template{Kind: sandbox.KindCommand, Image: "busybox", Egress: true}, egresstest.TenantPolicy},
	}
	total := make([][]time.Duration, len(cases))
	for i := 0; i < b.N; i++ {
		for ci, c := range cases {
			t0 := time.Now()
			sb, err := g.Prepare(ctx, c.tmpl)
			if err != nil {
				b.Fatal(err)
			}
			inv := cmd("/bin/true")
			inv.Workload.Image = "busybox"
			inv.Policy.Network = c.p
			res, err := sb.Run(ctx, inv)
			total[ci] = append(total[ci], time.Since(t0))
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("%s: %v %+v", c.name, err, res)
			}
			if err := sb.Destroy(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	for ci, c := range cases {
		b.ReportMetric(egressMS(egressMedian(total[ci])), c.name+"-p50-ms")
	}
	b.ReportMetric(egressMedian(total[1]).Seconds()/egressMedian(total[0]).Seconds(), "netstack/none")
}
