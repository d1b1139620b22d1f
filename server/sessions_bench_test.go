package server_test

import (
	"bufio"
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
)

// benchSession is a harness with container sessions, a client of alice
// (without the OpenAPI check, off the measured path) and a trusted session
// of hers, on the container tier.
func benchSession(b *testing.B) (*harness, *client.Client, *client.Session) {
	return benchSessionOf(b, sandbox.Trusted)
}

// benchSessionOf is benchSession for trust: trusted's session is on
// container, untrusted's on gVisor.
func benchSessionOf(b *testing.B, trust sandbox.TrustClass) (*harness, *client.Client, *client.Session) {
	var img string
	h := newHarnessWith(b, testConfig(), "", containerSessions(b, &img))
	c := client.New(h.url, aliceToken, nil)
	s, err := c.CreateSession(context.Background(), &client.SessionRequest{Policy: sandbox.Policy{Trust: trust}})
	if err != nil {
		b.Fatal(err)
	}
	return h, c, s
}

// BenchmarkSessionExec is an exec round trip of /bin/true in a warm
// container session through the HTTP API (client to daemon and back, with
// the exec's validation, the session's lock and the JSON both ways):
//
//	go test ./server -run '^$' -bench SessionExec -benchtime 200x
//
// backend/oci's BenchmarkSessionExecContainer is the same exec without the
// API, beside the runtime's own exec.
func BenchmarkSessionExec(b *testing.B) {
	_, c, s := benchSession(b)
	ctx := context.Background()
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

// BenchmarkExecFirstByte is live output's latency through the HTTP API: a
// process in a warm container session prints the wall clock (wovyr-guest
// now, the sandbox's agent binary) and sleeps; the client, attached to the
// exec's events, subtracts the printed time from the time the first
// stdout event reached it. The container shares the host's clock. The
// peer, measured in the same run, is the same binary started by os/exec
// on the host with its stdout read from a pipe: the floor of any live
// stream.
//
//	go test ./server -run '^$' -bench ExecFirstByte -benchtime 100x
func BenchmarkExecFirstByte(b *testing.B) {
	h, c, s := benchSession(b)
	ctx := context.Background()
	argv := []string{agent.GuestAgentPath, "now", "--sleep", "20ms"}
	first := func(data []byte, at time.Time) time.Duration {
		ns, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			b.Fatalf("printed %q: %v", data, err)
		}
		return at.Sub(time.Unix(0, ns))
	}
	var api, peer []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ex, err := c.StartExec(ctx, s.ID, &sandbox.Exec{Argv: argv})
		if err != nil {
			b.Fatal(err)
		}
		got := false
		err = c.ExecEvents(ctx, s.ID, ex.ID, 0, func(ev client.Event) error {
			if ev.Type == client.EventStdout && !got {
				api, got = append(api, first(ev.Data, time.Now())), true
			}
			return nil
		})
		if err != nil || !got {
			b.Fatalf("events: %v (stdout seen %v)", err, got)
		}
		cmd := exec.Command(filepath.Join(h.dir, "wovyr-guest"), argv[1:]...)
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		line, err := bufio.NewReader(out).ReadBytes('\n')
		at := time.Now()
		if err != nil {
			b.Fatal(err)
		}
		peer = append(peer, first(line, at))
		cmd.Wait()
	}
	b.StopTimer()
	p50 := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds()) / 1000
	}
	a, p := p50(api), p50(peer)
	b.ReportMetric(a, "first-byte-p50-ms")
	b.ReportMetric(float64(api[len(api)*99/100].Microseconds())/1000, "first-byte-p99-ms")
	b.ReportMetric(p, "peer-pipe-p50-ms")
	if _, err := c.DeleteSession(ctx, s.ID); err != nil {
		b.Fatal(err)
	}
}
