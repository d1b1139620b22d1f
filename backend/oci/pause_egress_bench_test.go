package oci

import (
	"context"
	"testing"
	"time"

	"github.com/wovyr/wovyr/egress/egresstest"
	"github.com/wovyr/wovyr/sandbox"
)

// BenchmarkGVisorPauseResume times a gVisor session's pause (checkpoint,
// then the sandbox destroyed) and its resume to the first exec's result
// (restore, claim, /bin/true), alternating in one run a session in an
// egress slot (netstack, an allowlist: its resume takes a fresh slot and
// binds it first) with one without a network:
//
//	go test ./backend/oci -run '^$' -bench GVisorPauseResume -benchtime 10x
func BenchmarkGVisorPauseResume(b *testing.B) {
	g := gvisorIn(b, newEgressRig(b, "ob"))
	ctx := context.Background()
	img := egressImage(b)
	type side struct {
		name   string
		tmpl   sandbox.Template
		claim  *sandbox.Claim
		s      *Sandbox
		pause  []time.Duration
		resume []time.Duration
	}
	claim := func(p sandbox.Policy) *sandbox.Claim {
		return &sandbox.Claim{ID: "bench-pause", Tenant: "bench", Image: img, Limits: sandbox.Limits{Wall: time.Minute}, Policy: p}
	}
	sides := []*side{
		{name: "egress", tmpl: sandbox.Template{Kind: sandbox.KindCommand, Image: img, Egress: true},
			claim: claim(sandbox.Policy{Trust: sandbox.Trusted, Network: egresstest.TenantPolicy})},
		{name: "none", tmpl: sandbox.Template{Kind: sandbox.KindCommand, Image: img},
			claim: claim(sandbox.Policy{Trust: sandbox.Trusted})},
	}
	e := &sandbox.Exec{Argv: []string{"/bin/true"}}
	for _, sd := range sides {
		sd.s = prepareTmpl(b, g, sd.tmpl)
		if err := sd.s.Open(ctx, sd.claim); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		for _, sd := range sides {
			t0 := time.Now()
			p, err := sd.s.Pause(ctx, "bench")
			if err == nil {
				err = sd.s.Destroy(ctx)
			}
			if err != nil {
				b.Fatalf("%s: pause: %v", sd.name, err)
			}
			t1 := time.Now()
			sb, err := g.Resume(ctx, p, "bench")
			if err != nil {
				b.Fatalf("%s: resume: %v", sd.name, err)
			}
			sd.s = sb.(*Sandbox)
			b.Cleanup(func() { _ = sb.Destroy(ctx) })
			if err := sd.s.Open(ctx, sd.claim); err != nil {
				b.Fatal(err)
			}
			if res, err := sd.s.Exec(ctx, e); err != nil || res.ExitCode != 0 {
				b.Fatalf("%s: exec after the resume: %+v %v", sd.name, res, err)
			}
			t2 := time.Now()
			if err := g.Discard(ctx, p); err != nil {
				b.Fatal(err)
			}
			sd.pause, sd.resume = append(sd.pause, t1.Sub(t0)), append(sd.resume, t2.Sub(t1))
		}
	}
	b.StopTimer()
	for _, sd := range sides {
		b.ReportMetric(float64(median(sd.pause).Microseconds())/1000, sd.name+"-pause-p50-ms")
		b.ReportMetric(float64(median(sd.resume).Microseconds())/1000, sd.name+"-resume-p50-ms")
	}
	b.ReportMetric(0, "ns/op")
}
