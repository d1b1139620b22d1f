package oci

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/wovyr/wovyr/plugin"
	"github.com/wovyr/wovyr/plugin/plugintest"
	"github.com/wovyr/wovyr/sandbox"
)

// BenchmarkUntrustedPluginCall: a call of an untrusted plugin, each in a
// fresh gVisor sandbox running `wovyr component-exec` on the compiled
// component the host ships (calc, C; jsdemo, JavaScript, about 12 MB,
// skipped where npm cannot install jco), alternating with the same
// sandbox's cold run of /bin/true: the difference is what the plugin
// runner adds to the sandbox.
//
//	go test ./backend/oci -run '^$' -bench UntrustedPluginCall -benchtime 10x
func BenchmarkUntrustedPluginCall(b *testing.B) {
	for _, name := range []string{"calc", "jsdemo"} {
		b.Run(name, func(b *testing.B) {
			g := benchBackend(b, true, false)
			var wasm []byte
			if name == "jsdemo" {
				wasm = plugintest.JS(b, plugintest.Jco(b), name)
			} else {
				var err error
				if wasm, err = os.ReadFile("../../plugin/testdata/calc/calc.wasm"); err != nil {
					b.Fatal(err)
				}
			}
			run := &sandboxRunner{t: b, b: g}
			h, err := plugin.NewHost(plugin.Config{Dir: b.TempDir(), Isolated: run, IsolatedArgv: []string{RunnerPath, "component-exec"},
				Limits: plugin.Limits{Memory: 64 << 20}})
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			m := &plugin.Manifest{Name: name, Component: plugin.Digest(wasm), Trust: sandbox.Untrusted,
				Limits: plugin.Limits{Fuel: 200_000_000, Memory: 32 << 20, WallMS: 10_000}}
			if _, err := h.Load(m, wasm); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			true_ := &sandbox.Invocation{Tenant: "acme", Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/true"}},
				Policy: sandbox.Policy{Trust: sandbox.Untrusted}}
			var ours, peer []time.Duration
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				r, err := h.Call(ctx, "acme", name, "add", json.RawMessage(`[40, 2]`), plugin.CallOptions{})
				if err != nil || string(r.Value) != "42" {
					b.Fatalf("add: %+v %v", r, err)
				}
				t1 := time.Now()
				if res, err := run.Run(ctx, true_); err != nil || res.Class != sandbox.OK {
					b.Fatalf("/bin/true: %+v %v", res, err)
				}
				ours, peer = append(ours, t1.Sub(t0)), append(peer, time.Since(t1))
			}
			b.StopTimer()
			o, p := median(ours), median(peer)
			b.ReportMetric(float64(o.Microseconds())/1000, "call-p50-ms")
			b.ReportMetric(float64(p.Microseconds())/1000, "bare-p50-ms")
			b.ReportMetric(float64((o-p).Microseconds())/1000, "runner-ms")
		})
	}
}
