package server_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/wovyr/wovyr/plugin"
)

// BenchmarkPluginCallHTTP: add(40, 2) as a tenant makes it, the whole HTTP
// round trip of POST /v1/plugins/calc/call through the Go client, against
// the same call on the daemon's own host in-process (the peer: the host
// path without HTTP), alternating, in one run. A call counts against the
// tenant's submission rate (100/s, burst 1000 by default): keep -benchtime
// under the burst, e.g. 400x.
func BenchmarkPluginCallHTTP(b *testing.B) {
	h, host := pluginHarnessHost(b, stateDir(b))
	ctx := context.Background()
	calc := testComponent(b, "calc")
	if _, err := h.client(opsToken).InstallPlugin(ctx, manifestFor(b, "calc", calc, true), calc); err != nil {
		b.Fatal(err)
	}
	alice := h.client(aliceToken)
	args := json.RawMessage(`{"a": 40, "b": 2}`)
	api := make([]time.Duration, 0, b.N)
	direct := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		r, err := alice.CallPlugin(ctx, "calc", "add", args)
		if err != nil || string(r.Value) != "42" {
			b.Fatal(r, err)
		}
		t1 := time.Now()
		d, err := host.Call(ctx, "alice", "calc", "add", args, plugin.CallOptions{})
		if err != nil || string(d.Value) != "42" {
			b.Fatal(d, err)
		}
		api, direct = append(api, t1.Sub(t0)), append(direct, time.Since(t1))
	}
	b.StopTimer()
	p50, d50 := percentile(api, 0.5), percentile(direct, 0.5)
	b.ReportMetric(float64(p50.Microseconds()), "http-p50-us")
	b.ReportMetric(float64(percentile(api, 0.99).Microseconds()), "http-p99-us")
	b.ReportMetric(float64(d50.Nanoseconds())/1000, "host-p50-us")
	b.ReportMetric(float64(p50)/float64(d50), "ratio")
}
