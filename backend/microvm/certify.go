package microvm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/vmimage"
	"github.com/wovyr/wovyr/vmm"
)

// ProbeRecord is one battery probe's outcome (BATTERY.md): what was tried,
// what was observed, pass or fail against the exact secure outcome, and
// the same probe against a deliberately weakened configuration, which must
// be caught.
type ProbeRecord struct {
	Probe    int    `json:"probe"`
	Name     string `json:"name"`
	Backend  string `json:"backend"`
	Accel    string `json:"accel"`
	Tried    string `json:"tried"`
	Observed string `json:"observed"`
	Pass     bool   `json:"pass"`
	// Control describes the weakened run; ControlCaught says the probe
	// reported its weakness (a probe that cannot fail is a defect).
	Control       string `json:"control,omitempty"`
	ControlCaught bool   `json:"control_caught"`
	// Waiver names the ADR that accepts a failing outcome on this node.
	Waiver string `json:"waiver,omitempty"`
}

// Certify runs the same microVM checks as Suite in one compact pass (five
// boots instead of about ten: the controls are folded into fewer VMs) and
// returns their records; it is the backend's own self-check. Certification
// proper is battery.Run over Suite. An error means the checks could not
// run.
func Certify(ctx context.Context, b *Backend) ([]ProbeRecord, error) {
	p, err := b.probed(ctx)
	if err != nil {
		return nil, err
	}
	c := &certifier{b: b, p: p}
	var recs []ProbeRecord
	for _, step := range []func(context.Context) ([]ProbeRecord, error){c.posture, c.guestProbes} {
		r, err := step(ctx)
		if err != nil {
			return recs, err
		}
		recs = append(recs, r...)
	}
	recs = append(recs, c.hygiene("/"))
	for i := range recs {
		recs[i].Backend, recs[i].Accel = b.Name(), string(p.accel)
	}
	return recs, nil
}

type certifier struct {
	b *Backend
	p *probed
}

// posture inspects a hardened warm VM's QEMU from the host (probes 1, 4, 5,
// 6) and, as the control, a VM started as root without seccomp sandbox or
// cgroup.
func (c *certifier) posture(ctx context.Context) ([]ProbeRecord, error) {
	warm := &Backend{cfg: c.b.cfg, probe: c.p, disks: c.b.disks}
	warm.cfg.Warm = true
	s, err := warm.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		return nil, err
	}
	defer s.Destroy(context.WithoutCancel(ctx))
	vs := s.(*vmSandbox)
	good := inspect(vs.m.Pid(), []string{c.p.image.Dir, vs.dir}, vs.net != nil)

	weak := c.b.spec(c.p, c.p.accel, "vm-control-"+randomID(), agent.ModeWarm, 128<<20)
	weak.UID, weak.GID, weak.AllowRoot, weak.NoSandbox = 0, 0, true, true
	weak.Limits = vmm.Limits{Unlimited: true}
	weak.Ports = []vmm.Port{{Name: agent.PortControl}}
	wdir := filepath.Join(vmsDir(c.b.cfg.StateDir), "wovyr-"+weak.ID)
	if err := os.MkdirAll(wdir, 0o700); err != nil {
		return nil, err
	}
	defer os.RemoveAll(wdir)
	if err := vmimage.MakeExt4(ctx, "", filepath.Join(wdir, "scratch.ext4"), "wovyr-scratch", 16<<20); err != nil {
		return nil, err
	}
	weak.Disks = []vmm.Disk{
		{Path: c.p.image.RootDisk(), Serial: agent.SerialRoot, ReadOnly: true},
		{Path: filepath.Join(wdir, "scratch.ext4"), Serial: agent.SerialScratch},
	}
	wm, err := c.b.cfg.VMM.Start(ctx, weak)
	if err != nil {
		return nil, fmt.Errorf("start the weakened control VM: %w", err)
	}
	defer wm.Kill()
	var rep agent.VMReply
	if err := roundTrip(wm.Port(agent.PortControl), deadlineIn(c.b.cfg.bootTimeout(c.p.accel)), agent.VMJob{Job: agent.Job{ID: "ready"}}, &rep, 1<<20); err != nil {
		return nil, fmt.Errorf("weakened control VM: %w; console: %s", err, tail(wm.Console(), 1024))
	}
	bad := inspect(wm.Pid(), []string{c.p.image.Dir}, false)
	// Probe 4's control: a process holding an open host directory (this
	// one, with / open) must be flagged.
	root, err := os.Open("/")
	if err != nil {
		return nil, err
	}
	defer root.Close()
	self := inspect(os.Getpid(), nil, false)

	// Probe 49: the VMM runs as its sandbox's own uid, which no other
	// sandbox shares; the control is the shared-account configuration.
	uids := func(be *Backend, observed int) []string {
		s1, err := be.Prepare(ctx, probeTemplate())
		if err != nil {
			return []string{err.Error()}
		}
		defer s1.Destroy(context.WithoutCancel(ctx))
		var bad []string
		if u := s1.(*vmSandbox).uid; int(u) == observed {
			bad = append(bad, fmt.Sprintf("two sandboxes share uid %d", u))
		}
		return bad
	}
	qemuUID := -1
	if f := strings.Fields(statusFields(filepath.Join("/proc", strconv.Itoa(vs.m.Pid()), "status"))["Uid"]); len(f) > 0 {
		qemuUID, _ = strconv.Atoi(f[0])
	}
	distinct := uids(c.b, qemuUID)
	if qemuUID != int(vs.uid) {
		distinct = append(distinct, fmt.Sprintf("QEMU runs as %d, not its sandbox's uid %d", qemuUID, vs.uid))
	}
	shared := &Backend{cfg: c.b.cfg, disks: c.b.disks}
	shared.cfg.SharedUser = true
	sp := *c.p
	if sp.uid, sp.gid, err = ensureUser(ctx, shared.cfg.User); err != nil {
		return nil, err
	}
	shared.probe = &sp
	s0, err := shared.Prepare(ctx, probeTemplate())
	if err != nil {
		return nil, err
	}
	sharedBad := uids(shared, int(s0.(*vmSandbox).uid))
	s0.Destroy(ctx)

	recs := []ProbeRecord{
		record(49, "per-VM host uid", "compare the VMM's uid with its sandbox's and with a concurrent sandbox's",
			distinct, sharedBad, "every VM as the shared wovyr-vm account"),
		record(1, "creds, caps, NNP, seccomp of every VMM thread", "read /proc/<qemu>/task/*/status",
			good.creds, bad.creds, "QEMU as root without -sandbox"),
		record(4, "host FD table", "classify readlink /proc/<qemu>/fd/*",
			good.fds, self.fds, "a process holding the host's / open"),
		record(5, "cgroups and rlimits", "read /proc/<qemu>/cgroup, its limits, /proc/<qemu>/limits",
			good.limits, bad.limits, "QEMU started without cgroup or rlimits"),
		record(6, "risky config (QEMU argv)", "lint /proc/<qemu>/cmdline",
			good.argv, bad.argv, "QEMU argv without -sandbox, run as root"),
	}
	accel := ProbeRecord{Probe: 6, Name: "accelerator: KVM, never TCG", Tried: "the probe's accelerator decision",
		Observed: "accel=" + string(c.p.accel), Pass: c.p.accel == vmm.KVM,
		Control: "n/a (the accelerator is a node fact)", ControlCaught: true}
	if !accel.Pass {
		accel.Waiver = "docs/adr/0006-microvm-tcg.md: no usable KVM on this node; isolation rests on TCG's emulation boundary"
	}
	return append(recs, accel), nil
}

func record(id int, name, tried string, good, bad []string, control string) ProbeRecord {
	obs := "no findings"
	if len(good) > 0 {
		obs = strings.Join(good, "; ")
	}
	ctl := control + ": "
	if len(bad) > 0 {
		ctl += "flagged " + strings.Join(bad, "; ")
	} else {
		ctl += "NOT flagged"
	}
	return ProbeRecord{Probe: id, Name: name, Tried: tried, Observed: obs, Pass: len(good) == 0,
		Control: ctl, ControlCaught: len(bad) > 0}
}

// guestProbes run in fresh one-shot VMs: disk fill (52), output flood (58), host artifacts
// (86) and block residue (92) with a reused scratch disk as the control.
func (c *certifier) guestProbes(ctx context.Context) ([]ProbeRecord, error) {
	canary := "WOVYR-CANARY-" + randomID()
	sa, err := c.b.Prepare(ctx, probeTemplate())
	if err != nil {
		return nil, err
	}
	defer sa.Destroy(context.WithoutCancel(ctx))
	a := sa.(*vmSandbox)
	perms := artifactPerms(a.dir)
	in := &sandbox.Invocation{ID: "flood", Tenant: "probe-a", Policy: sandbox.Policy{Trust: sandbox.Hostile},
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Env: []string{"C=" + canary},
			Argv: []string{"/bin/sh", "-c", `echo "$C" > /workspace/canary; echo "$C" > /tmp/canary; head -c 33554432 /dev/zero > /workspace/fill 2>/dev/null || echo ENOSPC; rm -f /workspace/fill; head -c 1000000 /dev/zero; head -c 1000000 /dev/zero >&2`}},
		Limits: sandbox.Limits{Output: 64 << 10, Wall: time.Minute, Disk: 16 << 20}}
	res, err := a.Run(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("probe 58: %w", err)
	}
	flood := floodFindings(res, 64<<10)
	disk := diskFindings(res.Stdout)
	// Control for 52: the check flags the output of a write that succeeded.
	diskCtl := diskFindings(nil)
	// Control for 58: an uncapped result of the same flood is flagged.
	uncapped := floodFindings(&sandbox.Result{Stdout: make([]byte, 1000000), Stderr: make([]byte, 1000000)}, 64<<10)
	// Keep tenant A's scratch disk for the control before it is destroyed.
	reused := filepath.Join(vmsDir(c.b.cfg.StateDir), "wovyr-vm-control-"+randomID()+".ext4")
	if err := copyFile(a.scratch(), reused); err != nil {
		return nil, err
	}
	defer os.Remove(reused)
	a.Destroy(ctx)
	if _, err := os.Stat(a.dir); !errors.Is(err, os.ErrNotExist) {
		perms = append(perms, "VM directory survives Destroy: "+a.dir)
	}
	for _, f := range []string{c.p.image.RootDisk(), c.p.image.Initramfs()} {
		if fileContains(f, canary) {
			perms = append(perms, "canary in template "+f)
		}
	}
	// Control for 86: the same checks flag a world-readable artifact.
	weakDir, err := os.MkdirTemp(vmsDir(c.b.cfg.StateDir), "wovyr-vm-control-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(weakDir)
	os.Chmod(weakDir, 0o755)
	os.WriteFile(filepath.Join(weakDir, "scratch.ext4"), []byte(canary), 0o644)

	clean, err := c.scanScratch(ctx, canary, "")
	if err != nil {
		return nil, fmt.Errorf("probe 92: %w", err)
	}
	dirty, err := c.scanScratch(ctx, canary, reused)
	if err != nil {
		return nil, fmt.Errorf("probe 92 control: %w", err)
	}
	return []ProbeRecord{
		record(52, "disk fill", "write 32 MiB into the workspace of a VM with a 16 MiB disk limit", disk,
			diskCtl, "the same check on the output of a write that did not fail"),
		record(58, "output flood", "1 MB to stdout and to stderr with a 64 KiB cap", flood,
			uncapped, "the same check on an uncapped 1 MB result"),
		record(86, "host artifact scan", "modes of the per-VM files while a VM is prepared; templates and directory after Destroy",
			perms, artifactPerms(weakDir), "a per-VM directory of 0755 with a 0644 disk"),
		record(92, "block residue", "tenant B reads its raw scratch device for tenant A's canary",
			clean, dirty, "tenant B given tenant A's used scratch disk"),
	}, nil
}

// scanScratch runs a fresh VM that greps its raw scratch device for the
// canary; scratch, if set, replaces its fresh scratch disk (the control).
func (c *certifier) scanScratch(ctx context.Context, canary, scratch string) ([]string, error) {
	s, err := c.b.Prepare(ctx, probeTemplate())
	if err != nil {
		return nil, err
	}
	defer s.Destroy(context.WithoutCancel(ctx))
	vs := s.(*vmSandbox)
	if scratch != "" {
		if err := copyFile(scratch, vs.scratch()); err != nil {
			return nil, err
		}
	}
	in := &sandbox.Invocation{ID: "scan", Tenant: "probe-b", Policy: sandbox.Policy{Trust: sandbox.Hostile},
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Env: []string{"C=" + canary},
			Argv: []string{"/bin/sh", "-c", `for d in /sys/block/vd*; do [ "$(cat $d/serial)" = ` + agent.SerialScratch + ` ] && grep -a -c "$C" /dev/${d##*/}; done; true`}},
		Limits: sandbox.Limits{Wall: 2 * time.Minute, Disk: 16 << 20}}
	res, err := vs.Run(ctx, in)
	if err != nil {
		return nil, err
	}
	if res.Class != sandbox.OK {
		return nil, fmt.Errorf("scan ended %s: %s", res.Class, res.Error)
	}
	if n := strings.TrimSpace(string(res.Stdout)); n != "0" {
		return []string{fmt.Sprintf("canary found %s times on the raw scratch device", n)}, nil
	}
	return nil, nil
}

func deadlineIn(d time.Duration) time.Time { return time.Now().Add(d) }

func floodFindings(res *sandbox.Result, limit int) []string {
	if len(res.Stdout) != limit || !res.StdoutTruncated || len(res.Stderr) != limit || !res.StderrTruncated {
		return []string{fmt.Sprintf("kept %d/%d bytes, truncated %v/%v", len(res.Stdout), len(res.Stderr), res.StdoutTruncated, res.StderrTruncated)}
	}
	return nil
}

// diskFindings checks probe 52's script output: the oversized write must
// have failed (ENOSPC at the scratch disk's size).
func diskFindings(stdout []byte) []string {
	if !strings.HasPrefix(string(stdout), "ENOSPC\n") {
		return []string{"32 MiB written to a 16 MiB scratch disk without ENOSPC"}
	}
	return nil
}

// probeTemplate keeps the in-guest probes small: under TCG every byte the
// guest writes or scans costs.
func probeTemplate() sandbox.Template {
	return sandbox.Template{Kind: sandbox.KindCommand, Limits: sandbox.Limits{Disk: 16 << 20}}
}
