package microvm

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/vmm"
)

// BenchmarkMicroVM measures side by side, in one run and interleaved so
// that machine load hits all alike:
//
//   - bare: plain qemu-system-x86_64 booting the same kernel and initramfs
//     on the same virtual machine (vmm.MachineType, vmm.AccelArgs) to the
//     marker (no hardening, no disks, no cgroup) — the raw peer;
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
	var bare, oneshot, ready, warm, bareCPU, oneshotCPU []time.Duration
	for b.Loop() {
		for range rounds {
			c0 := childCPU()
			bare = append(bare, bareBoot(b, be))
			c1 := childCPU()
			oneshot = append(oneshot, coldOneShot(b, be))
			bareCPU, oneshotCPU = append(bareCPU, c1-c0), append(oneshotCPU, childCPU()-c1)
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
			job := warmBe.vmJob(inv("/bin/true"), l)
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
	// CPU time of the child processes (QEMU, and mkfs for the one-shot's
	// scratch disk): a TCG guest never idles while it boots, so this is
	// its work, and it moves far less with the machine's load than wall
	// time does.
	b.ReportMetric(float64(median(oneshotCPU))/float64(median(bareCPU)), "oneshot/bare-cpu")
	b.Logf("accel=%s bare=%v oneshot=%v ready=%v", be.probe.accel, bare, oneshot, ready)
	b.Logf("child CPU: bare=%v oneshot=%v", bareCPU, oneshotCPU)
}

func bareBoot(b *testing.B, be *Backend) time.Duration {
	im := be.probe.image
	args := append([]string{"-machine", vmm.MachineType}, vmm.AccelArgs(be.probe.accel)...)
	args = append(args, "-m", "256M", "-smp", "1",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-chardev", "stdio,id=con,signal=off", "-serial", "chardev:con",
		"-kernel", im.Vmlinux(), "-initrd", im.Initramfs(),
		"-append", baseCmdline+" "+agent.CmdlineMode+"="+agent.ModeMarker)
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

// childCPU is the user+system time of this process's waited-for children.
func childCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median(d []time.Duration) time.Duration { return pct(d, 50) }

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkMicroVMClone measures, interleaved in one run (ADR 0018):
//
//   - oneshot: a cold one-shot /bin/true (boot, job, power-off) — the peer;
//   - restore: Restore of a clone (QEMU start, device state, thaw) with
//     one /bin/true on it: the one-shot `wovyr run` path once a golden
//     exists; its first exec pays TCG's empty translation cache;
//   - refill: a pooled clone's Restore including its warm-up job, off the
//     request path;
//   - claim: /bin/true on a refilled clone, what a pooled acquire serves.
//
// Run it with -benchtime=1x.
func BenchmarkMicroVMClone(b *testing.B) {
	const rounds = 7
	be := backend(b)
	pooled := sibling(b, be, func(c *Config) { c.Warm = true })
	ctx := context.Background()
	tmpl := sandbox.Template{Kind: sandbox.KindCommand}
	g, err := be.Golden(ctx, tmpl)
	if err != nil {
		b.Fatal(err)
	}
	pg, err := pooled.Golden(ctx, tmpl)
	if err != nil {
		b.Fatal(err)
	}
	var oneshot, restore, refill, claim []time.Duration
	for b.Loop() {
		for range rounds {
			oneshot = append(oneshot, coldOneShot(b, be))
			t0 := time.Now()
			s, err := be.Restore(ctx, g)
			if err != nil {
				b.Fatal(err)
			}
			runTrue(b, s)
			restore = append(restore, time.Since(t0))
			s.Destroy(ctx)
			t0 = time.Now()
			s, err = pooled.Restore(ctx, pg)
			if err != nil {
				b.Fatal(err)
			}
			refill = append(refill, time.Since(t0))
			t0 = time.Now()
			runTrue(b, s)
			claim = append(claim, time.Since(t0))
			s.Destroy(ctx)
		}
	}
	b.ReportMetric(ms(median(oneshot)), "oneshot-ms")
	b.ReportMetric(ms(median(restore)), "restore-to-result-ms")
	b.ReportMetric(ms(median(refill)), "refill-ms")
	b.ReportMetric(ms(median(claim)), "claim-ms")
	b.ReportMetric(float64(median(oneshot))/float64(median(restore)), "oneshot/restore")
	b.ReportMetric(float64(median(oneshot))/float64(median(claim)), "oneshot/claim")
	b.Logf("oneshot=%v restore=%v refill=%v claim=%v", oneshot, restore, refill, claim)
}

func runTrue(b *testing.B, s sandbox.Sandbox) {
	res, err := s.Run(context.Background(), inv("/bin/true"))
	if err != nil || res.ExitCode != 0 || res.Class != sandbox.OK {
		b.Fatalf("/bin/true: %v %+v", err, res)
	}
}
