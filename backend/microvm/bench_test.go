package microvm

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/sandbox"
)

// BenchmarkMicroVM measures side by side, in one run and interleaved so
// that machine load hits all alike:
//
//   - bare: plain qemu-system-x86_64 booting the same kernel and initramfs
//     to the marker (no hardening, no disks, no cgroup) — the raw peer;
//   - oneshot: a cold one-shot invocation of /bin/true (Prepare, Run,
//     Destroy: scratch disk, boot, modules, mounts, job and result disks);
//   - ready: a warm Prepare, boot to an agent that answered a ping;
//   - warm: one /bin/true invocation over a warm VM's control channel.
//
// Run it with -benchtime=1x; the rounds are fixed, since every round boots
// three VMs.
func BenchmarkMicroVM(b *testing.B) {
	const rounds, warmCalls = 5, 40
	be := backend(b)
	warmBe := sibling(b, be, func(c *Config) { c.Warm = true })
	ctx := context.Background()
	var bare, oneshot, ready, warm []time.Duration
	for b.Loop() {
		for range rounds {
			bare = append(bare, bareBoot(b, be))
			oneshot = append(oneshot, coldOneShot(b, be))
			t0 := time.Now()
			s, err := warmBe.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
			if err != nil {
				b.Fatal(err)
			}
			ready = append(ready, time.Since(t0))
			s.Destroy(ctx)
		}
		s, err := warmBe.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
		if err != nil {
			b.Fatal(err)
		}
		vs := s.(*vmSandbox)
		l := sandbox.Limits{}.WithDefaults()
		for i := range warmCalls {
			job := vmJob(inv("/bin/true"), l)
			job.ID = "w" + string(rune('a'+i%26))
			var rep agent.VMReply
			t0 := time.Now()
			if err := roundTrip(vs.conn, time.Now().Add(30*time.Second), job, &rep, resultDiskSize(l)); err != nil || rep.ExitCode != 0 {
				b.Fatalf("warm call: %v %+v", err, rep)
			}
			warm = append(warm, time.Since(t0))
		}
		s.Destroy(ctx)
	}
	b.ReportMetric(ms(median(bare)), "bare-boot-ms")
	b.ReportMetric(ms(median(oneshot)), "oneshot-ms")
	b.ReportMetric(ms(median(ready)), "ready-ms")
	b.ReportMetric(ms(median(warm)), "warm-ms")
	b.ReportMetric(ms(pct(warm, 99)), "warm-p99-ms")
	b.ReportMetric(float64(median(oneshot))/float64(median(bare)), "oneshot/bare")
	// Rounds are interleaved, so the per-round ratio cancels most of the
	// machine's load swings; its median is the steadier figure.
	paired := make([]time.Duration, len(bare))
	for i := range bare {
		paired[i] = time.Duration(float64(oneshot[i]) / float64(bare[i]) * 1000)
	}
	b.ReportMetric(float64(median(paired))/1000, "oneshot/bare-paired")
	b.Logf("accel=%s bare=%v oneshot=%v ready=%v", be.probe.accel, bare, oneshot, ready)
}

func bareBoot(b *testing.B, be *Backend) time.Duration {
	im := be.probe.image
	args := []string{"-M", "microvm", "-accel", string(be.probe.accel), "-m", "256M", "-smp", "1",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-chardev", "stdio,id=con,signal=off", "-serial", "chardev:con",
		"-kernel", im.Vmlinux(), "-initrd", im.Initramfs(),
		"-append", baseCmdline + " " + agent.CmdlineMode + "=" + agent.ModeMarker}
	t0 := time.Now()
	out, err := exec.Command("qemu-system-x86_64", args...).Output()
	d := time.Since(t0)
	if err != nil || !strings.Contains(string(out), agent.ReadyMarker) {
		b.Fatalf("bare boot: %v: %s", err, out)
	}
	return d
}

func coldOneShot(b *testing.B, be *Backend) time.Duration {
	ctx := context.Background()
	t0 := time.Now()
	s, err := be.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		b.Fatal(err)
	}
	res, err := s.Run(ctx, inv("/bin/true"))
	s.Destroy(ctx)
	d := time.Since(t0)
	if err != nil || res.ExitCode != 0 || res.Class != sandbox.OK {
		b.Fatalf("one-shot: %v %+v", err, res)
	}
	return d
}

func median(d []time.Duration) time.Duration { return pct(d, 50) }

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
