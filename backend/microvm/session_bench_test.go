package microvm

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/sandbox"
)

// BenchmarkSessionMicroVM measures a session in a warm VM, side by side in
// one run:
//
//   - exec: a session's exec of /bin/true (its job, then the sweep);
//   - raw: the same job over the same VM's control port, without the
//     session layer or the sweep — the peer, interleaved with exec;
//   - pause: the VM saved whole (RAM, devices, scratch disk);
//   - resume-exec: the saved VM restored for its tenant, claimed, and its
//     first exec's result;
//   - boot-exec: a new session's VM booted, claimed, and its first exec's
//     result — what a resume saves.
//
// Run it with -benchtime=1x: the rounds are fixed.
func BenchmarkSessionMicroVM(b *testing.B) {
	const execs, rounds = 60, 5
	be := sibling(b, backend(b), func(c *Config) { c.Warm = true })
	ctx := context.Background()
	tmpl := sandbox.Template{Kind: sandbox.KindCommand}
	nop := &sandbox.Exec{Argv: []string{"/bin/true"}}
	open := func(sb sandbox.Sandbox) sandbox.Session {
		ss := sb.(sandbox.Session)
		if err := ss.Open(ctx, sessionClaim("acme")); err != nil {
			b.Fatal(err)
		}
		return ss
	}
	run := func(ss sandbox.Session) {
		if res, err := ss.Exec(ctx, nop); err != nil || res.ExitCode != 0 {
			b.Fatalf("exec: %v %+v", err, res)
		}
	}
	var exec, raw, pause, resume, boot []time.Duration
	for b.Loop() {
		sb, err := be.Prepare(ctx, tmpl)
		if err != nil {
			b.Fatal(err)
		}
		ss := open(sb)
		vs := sb.(*vmSandbox)
		lim := sessionClaim("acme").Limits.WithDefaults()
		for i := range execs {
			t0 := time.Now()
			run(ss)
			t1 := time.Now()
			job := vs.sessionJob("raw"+string(rune('a'+i%26)), *nop, lim)
			var rep agent.VMReply
			if err := roundTrip(vs.conn, time.Now().Add(time.Minute), job, &rep, 1<<20); err != nil || rep.ExitCode != 0 {
				b.Fatalf("raw: %v %+v", err, rep)
			}
			exec, raw = append(exec, t1.Sub(t0)), append(raw, time.Since(t1))
		}
		for range rounds {
			t0 := time.Now()
			p, err := sb.(sandbox.Pauser).Pause(ctx, "acme")
			if err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			sb.Destroy(ctx)
			t2 := time.Now()
			if sb, err = be.Resume(ctx, p, "acme"); err != nil {
				b.Fatal(err)
			}
			run(open(sb))
			t3 := time.Now()
			be.Discard(ctx, p)
			fresh, err := be.Prepare(ctx, tmpl)
			if err != nil {
				b.Fatal(err)
			}
			run(open(fresh))
			pause, resume, boot = append(pause, t1.Sub(t0)), append(resume, t3.Sub(t2)), append(boot, time.Since(t3))
			fresh.Destroy(ctx)
		}
		sb.Destroy(ctx)
	}
	for name, ds := range map[string][]time.Duration{"exec": exec, "raw": raw, "pause": pause, "resume-exec": resume, "boot-exec": boot} {
		slices.Sort(ds)
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, name+"-p50-ms")
	}
	slices.Sort(exec)
	b.ReportMetric(float64(exec[len(exec)*99/100].Microseconds())/1000, "exec-p99-ms")
}
