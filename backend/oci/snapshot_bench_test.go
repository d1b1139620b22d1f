package oci

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/wovyr/wovyr/image"
	"github.com/wovyr/wovyr/sandbox"
)

// BenchmarkGVisorClone is issue 17's gVisor target, interleaved in one run:
// to the first result of a python3-with-imports tool on the "python"
// template, a cold one-shot gVisor start (the fastest cold path: the
// workload as the container's init) against a clone restored from the
// template's golden (Restore, then Run through its agent), and a cold
// pooled start (Prepare with its warm-up, then Run: what a pool without
// clones pays per refill and claim), and a claim (Run on a sandbox a pool
// prepared beforehand: what a request on a warm pool waits for). Destroy is outside every timing. The template is built once per machine (it needs
// the Debian mirror):
//
//	wovyr --state-dir /var/cache/wovyr-test/oci image build python
//	go test ./backend/oci -run '^$' -bench GVisorClone -benchtime 20x
func BenchmarkGVisorClone(b *testing.B) {
	if !image.Exists(filepath.Join(testState, "images"), "python") {
		b.Skip("python template not cached in " + testState + " (see the doc comment)")
	}
	argv := []string{"python3", "-c", "import json, re, subprocess; print(json.dumps([re.escape('a.b')]))"}
	const want = "[\"a\\\\.b\"]\n"
	tmpl := sandbox.Template{Kind: sandbox.KindCommand, Image: "python"}
	cold := benchBackend(b, true, false)
	pooled := benchBackend(b, true, true)
	clones := snapBackend(b)
	ctx := context.Background()
	g, err := clones.Golden(ctx, tmpl)
	if err != nil {
		b.Fatal(err)
	}
	first := func(sb sandbox.Sandbox, err error, start time.Time) time.Duration {
		if err != nil {
			b.Fatal(err)
		}
		inv := cmd(argv...)
		inv.Workload.Image = "python"
		res, err := sb.Run(ctx, inv)
		took := time.Since(start)
		if err != nil || string(res.Stdout) != want {
			b.Fatalf("run: %v %+v", err, res)
		}
		if err := sb.Destroy(ctx); err != nil {
			b.Fatal(err)
		}
		return took
	}
	var coldT, cloneT, pooledT, claimT []time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		sb, err := cold.Prepare(ctx, tmpl)
		coldT = append(coldT, first(sb, err, start))
		start = time.Now()
		sb, err = clones.Restore(ctx, g)
		cloneT = append(cloneT, first(sb, err, start))
		start = time.Now()
		sb, err = pooled.Prepare(ctx, tmpl)
		pooledT = append(pooledT, first(sb, err, start))
		sb, err = pooled.Prepare(ctx, tmpl) // what a pool holds before the request
		claimT = append(claimT, first(sb, err, time.Now()))
	}
	mc, mr := median(coldT), median(cloneT)
	b.ReportMetric(float64(mc.Microseconds())/1000, "cold-ms")
	b.ReportMetric(float64(mr.Microseconds())/1000, "clone-ms")
	b.ReportMetric(float64(median(pooledT).Microseconds())/1000, "pooled-ms")
	b.ReportMetric(float64(median(claimT).Microseconds())/1000, "claim-ms")
	b.ReportMetric(float64(mc)/float64(mr), "ratio")
	b.ReportMetric(float64(mc)/float64(median(claimT)), "cold/claim")
}
