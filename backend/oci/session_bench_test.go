package oci

import (
	"context"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// benchSessionExec times Exec(/bin/true) in one open session of a pooled
// sandbox against "<runtime> exec" of it into the same container, side by
// side in one run:
//
//	go test ./backend/oci -run '^$' -bench SessionExec -benchtime 200x
func benchSessionExec(b *testing.B, gvisor bool) {
	be := benchBackend(b, gvisor, true)
	ctx := context.Background()
	d, _ := be.chosen(ctx)
	sb, err := be.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		b.Fatal(err)
	}
	s := sb.(*Sandbox)
	defer s.Destroy(ctx)
	if err := s.Open(ctx, &sandbox.Claim{ID: "bench", Tenant: "bench", Policy: sandbox.Policy{Trust: sandbox.Trusted}}); err != nil {
		b.Fatal(err)
	}
	e := &sandbox.Exec{Argv: []string{"/bin/true"}}
	if _, err := s.Exec(ctx, e); err != nil { // the session's first exec
		b.Fatal(err)
	}
	var ours, raw []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		res, err := s.Exec(ctx, e)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec: %+v %v", res, err)
		}
		ours = append(ours, time.Since(start))
		ex := d.command("exec", s.id, "/bin/true")
		start = time.Now()
		if out, err := ex.CombinedOutput(); err != nil {
			b.Fatalf("raw exec: %v: %s", err, out)
		}
		raw = append(raw, time.Since(start))
	}
	mo, mr := median(ours), median(raw)
	b.ReportMetric(float64(mo.Microseconds())/1000, "exec-p50-ms")
	b.ReportMetric(float64(mr.Microseconds())/1000, "raw-"+d.name+"-exec-p50-ms")
	b.ReportMetric(float64(mo)/float64(mr), "ratio")
}

func BenchmarkSessionExecContainer(b *testing.B) { benchSessionExec(b, false) }
func BenchmarkSessionExecGVisor(b *testing.B)    { benchSessionExec(b, true) }
