package server_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
)

// BenchmarkSessionExec is an exec round trip of /bin/true in a warm
// container session through the HTTP API (client to daemon and back, with
// the exec's validation, the session's lock and the JSON both ways):
//
//	go test ./server -run '^$' -bench SessionExec -benchtime 200x
//
// backend/oci's BenchmarkSessionExecContainer is the same exec without the
// API, beside the runtime's own exec.
func BenchmarkSessionExec(b *testing.B) {
	var img string
	h := newHarnessWith(b, testConfig(), "", containerSessions(b, &img))
	ctx := context.Background()
	c := client.New(h.url, aliceToken, nil)
	s, err := c.CreateSession(ctx, &client.SessionRequest{Policy: sandbox.Policy{Trust: sandbox.Trusted}})
	if err != nil {
		b.Fatal(err)
	}
	e := &sandbox.Exec{Argv: []string{"/bin/true"}}
	if _, err := c.Exec(ctx, s.ID, e); err != nil {
		b.Fatal(err)
	}
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		res, err := c.Exec(ctx, s.ID, e)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec: %+v %v", res, err)
		}
		ds = append(ds, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "http-exec-p50-ms")
	b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds())/1000, "http-exec-p99-ms")
	if _, err := c.DeleteSession(ctx, s.ID); err != nil {
		b.Fatal(err)
	}
}
