package server_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
)

// BenchmarkSessionPauseResume is what a user of a paused session waits
// for, through the HTTP API, on container and on gVisor: a pause, then the
// first exec after it (/bin/true, which resumes the session). A container
// session keeps its workspace's archive and resumes into a fresh pooled
// sandbox with the workspace restored (resume: restart); a gVisor session
// is checkpointed by runsc with its upper layer and restored whole
// (resume: snapshot), its processes kept. The peers, in the same run and
// the same harness: a warm exec of /bin/true, and a new session of the
// same tier created and deleted.
//
//	go test ./server -run '^$' -bench SessionPauseResume -benchtime 30x
func BenchmarkSessionPauseResume(b *testing.B) {
	for _, tier := range []struct {
		name  string
		trust sandbox.TrustClass
	}{{"container", sandbox.Trusted}, {"gvisor", sandbox.Untrusted}} {
		b.Run(tier.name, func(b *testing.B) { benchPauseResume(b, tier.trust) })
	}
}

func benchPauseResume(b *testing.B, trust sandbox.TrustClass) {
	_, c, s := benchSessionOf(b, trust)
	ctx := context.Background()
	if err := c.Upload(ctx, s.ID, "src/main.py", make([]byte, 64<<10), 0o644); err != nil {
		b.Fatal(err)
	}
	e := &sandbox.Exec{Argv: []string{"/bin/true"}}
	var pause, resume, warm, create []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := c.Exec(ctx, s.ID, e); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if p, err := c.PauseSession(ctx, s.ID); err != nil || p.State != "paused" {
			b.Fatalf("pause: %+v %v", p, err)
		}
		t2 := time.Now()
		if res, err := c.Exec(ctx, s.ID, e); err != nil || res.ExitCode != 0 {
			b.Fatalf("exec after the pause: %+v %v", res, err)
		}
		t3 := time.Now()
		o, err := c.CreateSession(ctx, &client.SessionRequest{Policy: sandbox.Policy{Trust: trust}})
		if err != nil {
			b.Fatal(err)
		}
		t4 := time.Now()
		if _, err := c.DeleteSession(ctx, o.ID); err != nil {
			b.Fatal(err)
		}
		warm, pause, resume, create = append(warm, t1.Sub(t0)), append(pause, t2.Sub(t1)), append(resume, t3.Sub(t2)), append(create, t4.Sub(t3))
	}
	b.StopTimer()
	for name, ds := range map[string][]time.Duration{"warm-exec": warm, "pause": pause, "resume-exec": resume, "create": create} {
		slices.Sort(ds)
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, name+"-p50-ms")
	}
}
