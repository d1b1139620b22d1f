package microvm

import (
	"context"
	"testing"
	"time"

	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/sandbox"
)

// BenchmarkEgressOneShot measures, interleaved in one run, a cold one-shot
// /bin/true without a NIC (deny-all) and with one (an allowlist: egress
// slot, tap, virtio_net loaded and configured in the guest), and reports
// the paired ratio. Run it with -benchtime=1x.
func BenchmarkEgressOneShot(b *testing.B) {
	const rounds = 4
	be, _, _ := netBackend(b, "mx", nil)
	var plain, tapped []time.Duration
	for b.Loop() {
		for range rounds {
			plain = append(plain, coldOneShot(b, be))
			tapped = append(tapped, coldOneShotAllow(b, be))
		}
	}
	paired := make([]time.Duration, len(plain))
	for i := range plain {
		paired[i] = time.Duration(float64(tapped[i]) / float64(plain[i]) * 1000)
	}
	b.ReportMetric(ms(median(plain)), "denyall-ms")
	b.ReportMetric(ms(median(tapped)), "allowlist-ms")
	b.ReportMetric(float64(median(paired))/1000, "allowlist/denyall-paired")
	b.Logf("accel=%s denyall=%v allowlist=%v", be.probe.accel, plain, tapped)
}

func coldOneShotAllow(b *testing.B, be *Backend) time.Duration {
	ctx := context.Background()
	in := inv("/bin/true")
	in.Policy.Network = netpolicy.Policy{Allow: []netpolicy.Rule{{Host: "allowed.test", Ports: []uint16{443}}}}
	t0 := time.Now()
	s, err := be.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		b.Fatal(err)
	}
	res, err := s.Run(ctx, in)
	s.Destroy(ctx)
	d := time.Since(t0)
	if err != nil || res.ExitCode != 0 || res.Class != sandbox.OK {
		b.Fatalf("one-shot with a NIC: %v %+v", err, res)
	}
	return d
}
