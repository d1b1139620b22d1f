package microvm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/sandbox"
)

// Suite is the battery suite that certifies b (`wovyr certify --backend
// microvm`): the microVM probes that look at the VMM from the host and at
// what crosses the VM boundary, the contained probes run inside the guest
// and judged from the host (battery_guest.go), each run on the target and
// on a weakened copy (Weakened) or, for what no VM configuration weakens,
// on the weakened copy of controls' backend (the container suite), and why
// the remaining rows naming M do not apply. Probes sharing a VM share one
// boot per backend.
func Suite(b *Backend, controls battery.Suite) battery.Suite {
	type check struct {
		id   int
		weak battery.Weakness
		run  func(context.Context, *Backend) battery.Observation
	}
	checks := []check{
		{1, battery.RunAsRoot, func(ctx context.Context, b *Backend) battery.Observation {
			return b.postureObs(ctx, "read /proc/<qemu>/task/*/status of a running VM", func(f findings) []string { return f.creds })
		}},
		{4, WeakProbeSelf, func(ctx context.Context, b *Backend) battery.Observation {
			return b.postureObs(ctx, "classify readlink /proc/<qemu>/fd/* of a running VM", func(f findings) []string { return f.fds })
		}},
		{5, battery.NoRlimits, func(ctx context.Context, b *Backend) battery.Observation {
			return b.postureObs(ctx, "read /proc/<qemu>/cgroup, the cgroup limits and /proc/<qemu>/limits", func(f findings) []string { return f.limits })
		}},
		{6, battery.RunAsRoot, func(ctx context.Context, b *Backend) battery.Observation {
			o := b.postureObs(ctx, "lint /proc/<qemu>/cmdline of a running VM", func(f findings) []string { return f.argv })
			o.Observed += fmt.Sprintf("; accel=%s", b.probe.accel)
			if b.probe.accel != "kvm" {
				o.Observed += " (no usable KVM on this node: docs/adr/0006-microvm-tcg.md)"
			}
			return o
		}},
		{7, WeakProbeSelf, func(ctx context.Context, b *Backend) battery.Observation {
			root := "/"
			if b.cfg.weak == WeakProbeSelf {
				dir, _ := os.MkdirTemp("", "wovyr-hygiene-")
				defer os.RemoveAll(dir)
				os.MkdirAll(dir+"/sys/devices/system/cpu/vulnerabilities", 0o755)
				os.WriteFile(dir+"/sys/devices/system/cpu/vulnerabilities/spectre_v2", []byte("Vulnerable\n"), 0o644)
				root = dir
			}
			flags := hostFlags(root)
			// "Mitigated, or host flagged": the record carries the flags;
			// an unreadable host would be the failure.
			return battery.Observation{Tried: "read smt/active, ksm/run, /proc/swaps, cpu/vulnerabilities",
				Observed: "host flags: " + strings.Join(flags, "; "), Secure: root == "/" || len(flags) == 0}
		}},
		{49, battery.SharedUID, func(ctx context.Context, b *Backend) battery.Observation {
			var uids []uint32
			for range 2 {
				s, err := b.Prepare(ctx, probeTemplate())
				if err != nil {
					return battery.Observation{Observed: err.Error()}
				}
				defer s.Destroy(context.WithoutCancel(ctx))
				uids = append(uids, s.(*vmSandbox).uid)
			}
			return battery.Observation{Tried: "the host uids of two concurrently prepared VMs",
				Observed: fmt.Sprint(uids), Secure: uids[0] != 0 && uids[0] != uids[1]}
		}},
		{52, battery.NoDiskQuota, func(ctx context.Context, b *Backend) battery.Observation {
			a := b.tenantA(ctx)
			if a.err != nil {
				return battery.Observation{Observed: a.err.Error()}
			}
			bad := diskFindings(a.res.Stdout)
			return obs("write 32 MiB into the workspace of a VM with a 16 MiB disk limit", bad, "ENOSPC at the scratch disk's size")
		}},
		{58, battery.NoOutputCap, func(ctx context.Context, b *Backend) battery.Observation {
			a := b.tenantA(ctx)
			if a.err != nil {
				return battery.Observation{Observed: a.err.Error()}
			}
			return obs("1 MB to stdout and to stderr with a 64 KiB cap", floodFindings(a.res, 64<<10), "capped at 64 KiB, truncated flagged")
		}},
		{86, WeakWorldReadable, func(ctx context.Context, b *Backend) battery.Observation {
			a := b.tenantA(ctx)
			if a.err != nil {
				return battery.Observation{Observed: a.err.Error()}
			}
			return obs("modes of the per-VM files while prepared; templates and the directory after Destroy", a.artifacts, "0700 directory, 0600 files, removed, no canary in templates")
		}},
		{92, WeakReusedScratch, func(ctx context.Context, b *Backend) battery.Observation {
			a := b.tenantA(ctx)
			if a.err != nil {
				return battery.Observation{Observed: a.err.Error()}
			}
			c := &certifier{b: b, p: b.probe}
			bad, err := c.scanScratch(ctx, a.canary, "")
			if err != nil {
				return battery.Observation{Observed: err.Error()}
			}
			return obs("tenant B reads its raw scratch device for tenant A's canary", bad, "no canary")
		}},
		{98, battery.PausedAnyTenant, func(ctx context.Context, b *Backend) battery.Observation {
			ws := b.warmSibling()
			observed, secure := battery.TenantBoundSnapshot(ctx, ws, "", func(p sandbox.Paused) string {
				return filepath.Join(snapshotsDir(ws.cfg.StateDir), "paused", ws.Name(), p.ID)
			})
			return battery.Observation{Tried: battery.TenantBoundSnapshotTried, Observed: observed, Secure: secure}
		}},
	}
	for _, c := range cloneChecks() {
		checks = append(checks, check(c))
	}
	s := battery.Suite{Target: guestTarget(b), NotApplicable: notApplicable(b.cfg.Network != nil), Teardown: b.teardownNeighbour}
	for _, c := range checks {
		s.Probes = append(s.Probes, vmProbe(c.id, c.weak, c.run))
	}
	s.Probes = append(s.Probes, guestProbes(b, controls)...)
	for _, p := range s.Probes {
		delete(s.NotApplicable, p.ID)
	}
	return s
}

// vmProbe is a battery probe run on the target backend (or its weakened
// copy) once it has probed.
func vmProbe(id int, weak battery.Weakness, run func(context.Context, *Backend) battery.Observation) battery.Probe {
	return battery.Probe{ID: id, Weakness: weak, Backends: []string{"microvm"},
		Run: func(ctx context.Context, t battery.Target) battery.Observation {
			mb, ok := t.Backend.(*Backend)
			if !ok {
				return battery.Observation{Observed: fmt.Sprintf("target is %T, not the microvm backend", t.Backend)}
			}
			if _, err := mb.probed(ctx); err != nil {
				return battery.Observation{Observed: err.Error()}
			}
			return run(ctx, mb)
		}}
}

func obs(tried string, bad []string, secure string) battery.Observation {
	if len(bad) > 0 {
		return battery.Observation{Tried: tried, Observed: strings.Join(bad, "; ")}
	}
	return battery.Observation{Tried: tried, Observed: secure, Secure: true}
}

// batteryCache holds what several probes read from one VM, per backend.
type batteryCache struct {
	mu      sync.Mutex
	posture *findings
	postErr error
	a       *tenantARun
	clones  *cloneRun

	nbMu  sync.Mutex
	nb    *vmSandbox // the contained probes' neighbour VM (battery_watch.go)
	pings int
}

// postureObs inspects (once per backend) a running warm VM of b.
func (b *Backend) postureObs(ctx context.Context, tried string, pick func(findings) []string) battery.Observation {
	b.bat.mu.Lock()
	defer b.bat.mu.Unlock()
	if b.bat.posture == nil && b.bat.postErr == nil {
		s, err := b.warmSibling().Prepare(ctx, probeTemplate())
		if err != nil {
			b.bat.postErr = err
		} else {
			vs := s.(*vmSandbox)
			f := inspect(vs.m.Pid(), []string{b.probe.image.Dir, vs.dir}, vs.net != nil)
			if st := statusFields("/proc/" + strconv.Itoa(vs.m.Pid()) + "/status"); !strings.HasPrefix(st["Uid"], strconv.Itoa(int(vs.uid))+"\t") {
				f.creds = append(f.creds, fmt.Sprintf("QEMU runs as %q, not its sandbox's uid %d", st["Uid"], vs.uid))
			}
			if b.cfg.weak == WeakProbeSelf {
				root, _ := os.Open("/") // the control: a process holding the host's / open
				f.fds = inspect(os.Getpid(), nil, false).fds
				root.Close()
			}
			b.bat.posture = &f
			s.Destroy(context.WithoutCancel(ctx))
		}
	}
	if b.bat.postErr != nil {
		return battery.Observation{Tried: tried, Observed: b.bat.postErr.Error()}
	}
	return obs(tried, pick(*b.bat.posture), "no findings")
}

// tenantARun is one one-shot VM that seeds a canary, fills its disk and
// floods its output (probes 52, 58, 86, 92).
type tenantARun struct {
	canary    string
	res       *sandbox.Result
	artifacts []string
	err       error
}

func (b *Backend) tenantA(ctx context.Context) *tenantARun {
	b.bat.mu.Lock()
	defer b.bat.mu.Unlock()
	if b.bat.a != nil {
		return b.bat.a
	}
	a := &tenantARun{canary: "WOVYR-CANARY-" + randomID()}
	b.bat.a = a
	s, err := b.Prepare(ctx, probeTemplate())
	if err != nil {
		a.err = err
		return a
	}
	vs := s.(*vmSandbox)
	a.artifacts = artifactPerms(vs.dir)
	a.res, a.err = vs.Run(ctx, tenantAInvocation(a.canary))
	if err := s.Destroy(ctx); err != nil && a.err == nil {
		a.err = err
	}
	if _, err := os.Stat(vs.dir); !errors.Is(err, os.ErrNotExist) {
		a.artifacts = append(a.artifacts, "VM directory survives Destroy: "+vs.dir)
	}
	for _, f := range []string{b.probe.image.RootDisk(), b.probe.image.Initramfs()} {
		if fileContains(f, a.canary) {
			a.artifacts = append(a.artifacts, "canary in template "+f)
		}
	}
	return a
}

func tenantAInvocation(canary string) *sandbox.Invocation {
	return &sandbox.Invocation{ID: "tenant-a", Tenant: "probe-a", Policy: sandbox.Policy{Trust: sandbox.Hostile},
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Env: []string{"C=" + canary},
			Argv: []string{"/bin/sh", "-c", `echo "$C" > /workspace/canary; echo "$C" > /tmp/canary; head -c 33554432 /dev/zero > /workspace/fill 2>/dev/null || echo ENOSPC; rm -f /workspace/fill; head -c 1000000 /dev/zero; head -c 1000000 /dev/zero >&2; sync`}},
		Limits: sandbox.Limits{Output: 64 << 10, Wall: time.Minute, Disk: 16 << 20}}
}

// notApplicable says why the other rows naming M do not apply. A backend
// with an egress service (withNet) gives VMs a NIC: its egress rows apply
// and only EgressSuite, which has the harness, can probe them.
func notApplicable(withNet bool) map[int]string {
	const guest = "its secure outcome (a refusal, a masked path, a read-only file) is one the guest kernel's root, the tenant by design, chooses for itself (BATTERY.md: on M the boundary is the VMM); what can cross it is probed inside the guest and judged from the host: every kernel-surface attempt must be served by the guest's kernel (13, 20, 25, 28-36, 38-40), the limits and resource rows are bounded host-side (44-55, 60), and the VMM's host side is probes 1, 4, 5, 6"
	noNIC := "a microVM has no network device (probe 6 lints the VMM argv for any NIC) and any allow rule is refused as policy-unenforceable"
	if withNet {
		noNIC = "a VM's only network is a tap in its egress slot, by descriptor (probe 6 lints the VMM argv): whatever the guest opens leaves through the host-side table, stub and proxy, which bound and judge it (egress rows 70-81 via EgressSuite)"
	}
	m := map[int]string{
		2:  "the VMM runs in the host's namespaces by design: it holds no path to host files (probe 4), no NIC and no reachable socket (probe 6), and the guest kernel is the tenant's namespace",
		3:  "the VMM's root and cwd are the host's /, but it opens nothing by path: every file it uses is passed as a descriptor (probe 4)",
		10: "the VMM has no QMP, monitor or path-reachable socket (probe 6); the guest sees only its virtio devices",
		14: "the host never follows a path inside the guest: it reads one length-prefixed frame from the result disk (TestGarbledResultDiskIsBackendFailure) and collects no files",
		15: "the host reads nothing from the guest's filesystem, only the raw result disk after the VM is gone",
		17: "images are built by wovyr from a host directory (mkfs.ext4 -d) and attached read-only at the VMM; tenant code runs as guest root anyway",
		22: "no host process runs tenant files: the host reads only the result frame; guest binaries run only in the guest",
		23: "the microvm backend takes no annotations or runtime flags from invocations",
		44: guest,
		45: "each VM has its own kernel and PID space; host-side, VMMs run as distinct uids (probe 49)",
		46: "each VM has its own kernel: no IPC namespace is shared",
		47: "each VM has its own kernel and loopback; " + noNIC,
		48: "each VM gets a fresh scratch disk (probe 92) and the shared root disk is read-only at the VMM",
		50: "a fork bomb exhausts only the guest (pids limit in the guest's cgroup); the VMM's host cgroup bounds its threads (probe 5)",
		51: "the guest's cgroup OOM-kills the job (TestWarmOOMInsideGuest); guest RAM and the VMM's host cgroup bound the VM (probe 5)",
		53: "inodes are the scratch disk's, a fixed-size ext4 image per VM (probe 52)",
		54: "descriptors are the guest kernel's; the VMM's own are bounded by RLIMIT_NOFILE (probe 5)",
		55: "the guest agent kills the job at its wall limit and the host kills a silent VM at wall + boot allowance (TestOneShotHungGuestKilledAtDeadline); the VMM has a CPU quota (probe 5)",
		56: guest, 57: guest, 60: "every guest process dies with the VM; Destroy kills the VMM's cgroup and verifies it empty",
		59: noNIC, 82: guest, 83: noNIC, 84: noNIC,
		89: "a clone's NIC moves to its own slot, MAC and address at thaw (agent.Thaw) and the claiming tenant's allowlist holds on it (TestEgressCloneClaim); " + noNIC,
		90: "the guest agent kills every process of a job when it ends (a setsid daemon does not survive into the VM's next job), and a golden is captured after only the template's warm-up job: a clone starts with exactly the booted template's processes and the agent's descriptors (TestCloneIsItsOwnAndCarriesNothing compares clones' user processes); a control would need an agent that leaves processes behind, which no configuration builds",
		91: "no credential enters a VM: egress is held host-side per slot (no token or proxy credential in the guest), and a golden is captured before any invocation, so nothing of a tenant's (env, files) is in it (row 85)",
	}
	for _, id := range []int{8, 9, 11, 12, 13, 20, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43} {
		m[id] = guest
	}
	for id := 70; id <= 81; id++ {
		m[id] = noNIC
	}
	if withNet {
		for _, id := range egressRows {
			delete(m, id) // these need the egress harness: EgressSuite
		}
	}
	return m
}

var _ battery.Weakener = (*Backend)(nil)
