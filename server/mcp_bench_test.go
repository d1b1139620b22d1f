package server_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
)

// BenchmarkMCPRunCommand pairs, in one run and alternating call by call,
// an MCP run_command of /bin/true over /mcp (the Go SDK's streamable-HTTP
// client; the tool's in-process API call inside) with the same invocation
// through the HTTP API (client.Run), both on the native tier:
//
//	go test ./server -run '^$' -bench MCPRunCommand -benchtime 300x
//
// It reports each one's p50 and p99 and the ratio of the p50s (the issue's
// target: at most 2).
func BenchmarkMCPRunCommand(b *testing.B) {
	h := newHarness(b, mcpConfig(sandbox.Trusted, 0), "")
	ctx := context.Background()
	api := client.New(h.url, aliceToken, &http.Client{})
	cs := mcpHTTP(b, h, aliceToken)
	inv := func() *sandbox.Invocation {
		return &sandbox.Invocation{Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/true"}},
			Policy: sandbox.Policy{Trust: sandbox.Trusted}, Limits: sandbox.Limits{Output: 64 << 10}}
	}
	args := &sdk.CallToolParams{Name: "run_command", Arguments: map[string]any{"argv": []string{"/bin/true"}}}
	viaAPI := func() {
		res, err := api.Run(ctx, inv())
		if err != nil || res.ExitCode != 0 || res.Backend != "native" {
			b.Fatalf("api: %+v %v", res, err)
		}
	}
	viaMCP := func() {
		res, err := cs.CallTool(ctx, args)
		if err != nil || res.IsError {
			b.Fatalf("mcp: %+v %v", res, err)
		}
	}
	for range 10 { // warm both paths (pools, connections, schema caches)
		viaAPI()
		viaMCP()
	}
	apiDs, mcpDs := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Alternate which goes first, so neither always follows the other.
		first, second, fd, sd := viaAPI, viaMCP, &apiDs, &mcpDs
		if i%2 == 1 {
			first, second, fd, sd = viaMCP, viaAPI, &mcpDs, &apiDs
		}
		start := time.Now()
		first()
		mid := time.Now()
		second()
		*fd, *sd = append(*fd, mid.Sub(start)), append(*sd, time.Since(mid))
	}
	b.StopTimer()
	ap50, mp50 := percentile(apiDs, 0.5), percentile(mcpDs, 0.5)
	b.ReportMetric(msf(ap50), "api-p50-ms")
	b.ReportMetric(msf(percentile(apiDs, 0.99)), "api-p99-ms")
	b.ReportMetric(msf(mp50), "mcp-p50-ms")
	b.ReportMetric(msf(percentile(mcpDs, 0.99)), "mcp-p99-ms")
	b.ReportMetric(float64(mp50)/float64(ap50), "mcp/api-p50")
}
