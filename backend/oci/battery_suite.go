package oci

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/image"
	"github.com/wovyr/wovyr/sandbox"
)

// Suite is the escape battery for the container or gvisor backend b: the
// shared process probes (run by the prober inside the sandbox, through the
// agent binary mounted at /.wovyr/agent) plus the host-side posture probes
// of this package, over template image ("busybox" if empty). Each probe has
// a positive control built by Weakened.
func Suite(b *Backend, image string) battery.Suite {
	if image == "" {
		image = b.cfg.DefaultImage
	}
	var probes []battery.Probe
	for _, p := range battery.ProcessProbes(b.name) {
		switch p.ID {
		case 1, 5, 49:
			continue // replaced by host-side versions below
		case 45, 48, 60:
			// Separate pid namespaces hide tenants from each other even
			// on a shared uid; the control must drop them.
			if p.ID != 60 {
				p.Weakness = HostPIDAsRoot
			}
		}
		probes = append(probes, p)
	}
	for _, p := range []battery.Probe{
		{ID: 1, Weakness: battery.RunAsRoot, Run: probeHostCreds},
		{ID: 2, Weakness: battery.HostNetwork, Run: probeNamespaces},
		{ID: 5, Weakness: battery.NoRlimits, Run: probeHostLimits},
		{ID: 6, Weakness: Privileged, Run: probeSpecLint},
		{ID: 11, Weakness: Privileged, Run: probeMount},
		{ID: 24, Weakness: Privileged, Run: probeCaps},
		{ID: 49, Weakness: battery.SharedUID, Run: probeHostUIDs},
		{ID: 8, Weakness: HostPIDAsRoot, Run: shellProbe("list /proc/1/root and count the pids visible in /proc",
			`ls /proc/1/root >/dev/null 2>&1 && echo root-ok; ls /proc | grep -c '^[0-9]'`,
			func(out string) bool {
				// runsc refuses /proc/1/root to the workload: also secure.
				f := strings.Fields(out)
				return len(f) > 0 && atoi(f[len(f)-1]) <= 8
			})},
		{ID: 9, Weakness: HostBind, Run: shellProbe("list mount points (mountinfo) inside the sandbox",
			`cut -d' ' -f5 /proc/self/mountinfo | sort -u`, onlyDeclaredMounts)},
		{ID: 93, Weakness: HostPathLayers, Run: shellProbe("read /proc/self/mountinfo and /proc/mounts for the node's sandbox layout and host-path layer names",
			`cat /proc/self/mountinfo /proc/mounts`, func(out string) bool { return noSandboxLayout(b, out) })},
		{ID: 10, Weakness: battery.HostNetwork, Run: shellProbe("look for unix sockets in the filesystem and in /proc/net/unix",
			`find / -xdev -type s 2>/dev/null | head -5; tail -n +2 /proc/net/unix | wc -l`,
			func(out string) bool { return strings.TrimSpace(out) == "0" })},
		{ID: 12, Weakness: WritableProcSys, Run: shellProbe("write core_pattern, sysrq-trigger, a network sysctl and /sys",
			`echo 1 > /proc/sys/net/ipv4/ip_forward 2>/dev/null && echo SYSCTL; echo core > /proc/sys/kernel/core_pattern 2>/dev/null && echo CORE; echo h > /proc/sysrq-trigger 2>/dev/null && echo SYSRQ; echo 1 > /sys/kernel/profiling 2>/dev/null && echo SYS; echo end`,
			func(out string) bool { return strings.TrimSpace(out) == "end" })},
		{ID: 26, Weakness: Privileged, Run: shellProbe("unshare user, mount and net namespaces",
			`unshare -U -r true 2>/dev/null && echo USERNS; unshare -m true 2>/dev/null && echo MNTNS; unshare -n true 2>/dev/null && echo NETNS; echo end`,
			func(out string) bool { return strings.TrimSpace(out) == "end" })},
		{ID: 27, Weakness: Privileged, Run: shellProbe("setns into pid 1's namespaces, and into its own (the syscall itself)",
			`nsenter -t 1 -u -i -n true 2>/dev/null && echo ENTERED1; nsenter -t $$ -u -i -n true 2>/dev/null && echo ENTERED; echo end`,
			func(out string) bool { return strings.TrimSpace(out) == "end" })},
		{ID: 37, Weakness: Privileged, Run: shellProbe("sethostname, then read the name",
			`hostname evil 2>/dev/null && echo SET; hostname`,
			func(out string) bool { return strings.TrimSpace(out) == "wovyr" })},
		{ID: 42, Weakness: HostDevices, Run: shellProbe("list /dev, mknod mem and sda, open kvm",
			`ls /dev | tr '\n' ' '; echo; mknod /tmp/mem c 1 1 2>/dev/null && head -c 16 /tmp/mem >/dev/null 2>&1 && echo MEM; mknod /tmp/sda b 8 0 2>/dev/null && head -c 16 /tmp/sda >/dev/null 2>&1 && echo SDA; [ -e /dev/kvm ] && echo KVM; echo end`,
			minimalDev)},
		{ID: 43, Weakness: Unmasked, Run: shellProbe("read kcore, kallsyms, timer_list, keys; list /sys/firmware and debugfs",
			`for f in /proc/kcore /proc/kallsyms /proc/timer_list /proc/keys; do [ -n "$(head -c 64 $f 2>/dev/null)" ] && echo READ $f; done; for d in /sys/firmware /sys/kernel/debug; do ls -A $d 2>/dev/null | grep -q . && echo LISTED $d; done; echo end`,
			func(out string) bool { return strings.TrimSpace(out) == "end" })},
	} {
		p.Backends = []string{b.name}
		probes = append(probes, p)
	}
	probes = append(probes, kernelProbes(b)...)
	fsps, fsNA := fsProbes(b)
	probes = append(probes, fsps...)
	const noNet = "the sandbox has a loopback-only network namespace and allowlists are refused (Capability.Egress=false); every egress row reduces to row 70"
	const noSnap = "sandboxes are single-use and never snapshotted yet (residue across tenants: rows 48 and 60)"
	na := map[int]string{
		59: noNet,
		23: "invocations carry no annotations: the spec is generated whole by wovyr, and row 6 rejects runtime-steering annotations in it",
		41: "Dirty Pipe (CVE-2022-0847) is fixed in every kernel this runs on (5.16.11+; the record is keyed to the kernel): the in-sandbox attempt (wovyr-guest probe sys dirtypipe) leaves its read-only file unchanged, but no configuration of a patched kernel can make a positive control flag, so it cannot certify anything",
	}
	maps.Copy(na, kernelNotApplicable(b))
	maps.Copy(na, fsNA)
	for id := 71; id <= 84; id++ {
		na[id] = noNet
	}
	if b.egressCapable() {
		probes = append(probes, egressProbes(b)...) // battery_egress.go
		for id := 71; id <= 84; id++ {
			delete(na, id)
		}
		na[82] = egressNA82
		slotControls(b, probes)
	}
	for id := 85; id <= 92; id++ {
		na[id] = noSnap
	}
	if b.gvisor {
		clones := cloneProbes(b) // battery_clones.go
		probes = append(probes, clones...)
		for _, p := range clones {
			delete(na, p.ID)
		}
		maps.Copy(na, cloneNotApplicable)
		probes = append(probes, pausedProbe(b)) // battery_paused.go
	}
	probes = append(probes, battery.GPUProbes(b.name)...) // they run only where a GPU exists
	if b.gvisor {
		gvisorControls(b, probes)
	}
	for i := range probes {
		probes[i].Run = retryLostSandbox(probes[i].Run)
	}
	return battery.Suite{
		Target:        battery.Target{Backend: b, Guest: []string{agentPath, "probe"}, Image: image},
		Probes:        probes,
		NotApplicable: na,
		Prerequisites: []battery.Prerequisite{templatePrerequisite(b, image)},
	}
}

// gvisorOwnKernel are the rows no runsc configuration can weaken: the
// Sentry keeps one process table per sandbox, its own procfs and sysfs (so
// no runtime socket, host pid, writable host sysctl or unmasked kernel file
// is ever visible) and shows no mount flags on its root. Their positive
// controls run the same probe on the container backend's weakened copy,
// which shows the probe detects the weakness where it can exist; the
// record names that backend in the control's observation.
//
// The egress rows' EgressHostNetns control (row 75) runs there too: in the
// egress rig's stand-in host namespace runsc's netstack would take over
// every interface, the rig's own with them, instead of bypassing a slot.
var gvisorOwnKernel = []int{10, 12, 17, 43, 45, 48, 60, 93}

// gpuResidueRow (96) has its control on the container too: under gVisor
// every host descriptor on a device is the Sentry's or the gofer's, which
// end with the sandbox, so no holder can outlive it as a host process
// there; the container's KeepOrphans copy shows the probe finds one.
const gpuResidueRow = 96

func gvisorControls(b *Backend, probes []battery.Probe) {
	cfg := b.cfg
	cfg.Runtime = ""
	// The container that stands in for gVisor's own kernel has no slot, as
	// gVisor's deny-all sandboxes (--network=none) have none: the slot's
	// host-owned netns would defeat the weakened copy's network sysctl
	// write (row 12).
	cfg.Network = nil
	c, err := NewContainer(cfg)
	if err != nil {
		return // the controls then fail, and gvisor stays uncertified
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !c.Probe(ctx).Available {
		return
	}
	for i := range probes {
		if slices.Contains(gvisorOwnKernel, probes[i].ID) || probes[i].Weakness == EgressHostNetns || probes[i].ID == gpuResidueRow {
			probes[i].ControlOn = c
		}
	}
}

// prepared prepares one sandbox of t's backend and returns it as *Sandbox.
func prepared(ctx context.Context, t battery.Target) (*Sandbox, error) {
	sb, err := t.Backend.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand, Image: t.Image})
	if err != nil {
		return nil, err
	}
	s, ok := sb.(*Sandbox)
	if !ok {
		sb.Destroy(ctx)
		return nil, fmt.Errorf("not an OCI sandbox")
	}
	return s, nil
}

// started is prepared with the container running, for the probes that
// inspect a live sandbox's processes from the host: a one-shot sandbox
// (oneshot.go) starts its agent early, as a Run that needs it would. Its
// container is the one a one-shot workload gets but for the process.
func started(ctx context.Context, t battery.Target) (*Sandbox, error) {
	s, err := prepared(ctx, t)
	if err != nil || !s.oneShot {
		return s, err
	}
	if err := s.startAgent(ctx); err != nil {
		s.Destroy(context.WithoutCancel(ctx))
		return nil, err
	}
	return s, nil
}

func shell(t battery.Target, script string) *sandbox.Invocation {
	return &sandbox.Invocation{Tenant: "wovyr-battery", Policy: sandbox.Policy{Trust: sandbox.Trusted},
		Limits:   sandbox.Limits{Wall: 20 * time.Second},
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Image: t.Image, Argv: []string{"/bin/sh", "-c", script}}}
}

// hostTasks lists "pid/tid" status files of every thread in the sandbox's
// pool cgroup, as the host sees them.
func hostTasks(s *Sandbox) []string {
	var out []string
	for _, pid := range cgroupProcs(poolCgroup(s.id)) {
		tids, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
		out = append(out, tids...)
	}
	return out
}

func statusFields(file string) map[string]string {
	m := map[string]string{}
	f, err := os.Open(file)
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// probeHostCreds is row 1 from the host: every thread of the sandbox (the
// agent, or runsc's Sentry and gofer) runs unprivileged — no host uid 0.
func probeHostCreds(ctx context.Context, t battery.Target) battery.Observation {
	obs := battery.Observation{Tried: "host reads Uid/Gid/CapEff/NoNewPrivs/Seccomp of every sandbox thread"}
	s, err := started(ctx, t)
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	defer s.Destroy(context.WithoutCancel(ctx))
	tasks := hostTasks(s)
	seen := map[string]bool{}
	secure := len(tasks) > 0
	for _, f := range tasks {
		st := statusFields(f)
		uids := strings.Fields(st["Uid"])
		key := fmt.Sprintf("uid=%s cap=%s nnp=%s seccomp=%s", st["Uid"], st["CapEff"], st["NoNewPrivs"], st["Seccomp"])
		seen[key] = true
		if len(uids) != 4 || slices.Contains(uids, "0") {
			secure = false
		}
		if !s.b.gvisor && (st["CapEff"] != "0000000000000000" || st["NoNewPrivs"] != "1" || st["Seccomp"] != "2") {
			secure = false
		}
	}
	obs.Observed = fmt.Sprintf("%d threads: %s", len(tasks), strings.Join(slices.Sorted(maps.Keys(seen)), "; "))
	obs.Secure = secure
	return obs
}

// probeNamespaces is row 2: every sandbox process is in new mnt, pid, ipc,
// uts, net, user and cgroup namespaces (gVisor: the Sentry's own).
func probeNamespaces(ctx context.Context, t battery.Target) battery.Observation {
	obs := battery.Observation{Tried: "host compares /proc/<pid>/ns/* of the sandbox with its own"}
	s, err := started(ctx, t)
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	defer s.Destroy(context.WithoutCancel(ctx))
	kinds := []string{"mnt", "pid", "ipc", "uts", "net", "user", "cgroup"}
	pids := cgroupProcs(poolCgroup(s.id))
	shared := map[string]bool{}
	for _, pid := range pids {
		for _, k := range kinds {
			mine, _ := os.Readlink("/proc/self/ns/" + k)
			theirs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, k))
			if err == nil && theirs == mine {
				shared[k] = true
			}
		}
	}
	if s.b.gvisor {
		// runsc keeps its processes in the host's pid and cgroup
		// namespaces; the workload's pid and cgroup views are the
		// Sentry's own, virtualised inside it. The rest must be new.
		delete(shared, "pid")
		delete(shared, "cgroup")
	}
	obs.Observed = fmt.Sprintf("%d processes; shared with the host: %v", len(pids), slices.Sorted(maps.Keys(shared)))
	obs.Secure = len(pids) > 0 && len(shared) == 0
	return obs
}

// probeHostLimits is row 5: the tenant cgroup carries the requested memory
// and pids limits and the workload runs under the requested rlimits.
func probeHostLimits(ctx context.Context, t battery.Target) battery.Observation {
	obs := battery.Observation{Tried: "run with memory=96MiB pids=40 nofile=99 disk=8MiB; host reads the tenant cgroup, guest reads its limits"}
	s, err := prepared(ctx, t)
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	defer s.Destroy(context.WithoutCancel(ctx))
	inv := shell(t, "ulimit -n; ulimit -f; ulimit -c")
	inv.Limits = sandbox.Limits{Memory: 96 << 20, Pids: 40, NoFile: 99, Disk: 8 << 20, Wall: 20 * time.Second}
	res, err := s.Run(ctx, inv)
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	var mem, pids string
	for _, d := range cgroupDirs(s.tenant.Path()) {
		if b, err := os.ReadFile(d + "/memory.limit_in_bytes"); err == nil {
			mem = strings.TrimSpace(string(b))
		}
		if b, err := os.ReadFile(d + "/pids.max"); err == nil {
			pids = strings.TrimSpace(string(b))
		}
	}
	inside := strings.Fields(string(res.Stdout))
	obs.Observed = fmt.Sprintf("cgroup %s memory=%s pids.max=%s; inside nofile/fsize-blocks/core=%v", s.tenant.Path(), mem, pids, inside)
	obs.Secure = mem == fmt.Sprint(memoryBudget(96<<20, s.b.gvisor)) && pids == fmt.Sprint(pidsBudget(40, s.b.gvisor)) &&
		slices.Equal(inside, []string{"99", "16384", "0"})
	return obs
}

// probeSpecLint is row 6: the bundle's spec and the runtime flags carry no
// risky setting (LintSpec).
func probeSpecLint(ctx context.Context, t battery.Target) battery.Observation {
	obs := battery.Observation{Tried: "lint the generated config.json and runtime flags"}
	s, err := prepared(ctx, t)
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	defer s.Destroy(context.WithoutCancel(ctx))
	js, err := os.ReadFile(filepath.Join(s.dir, "config.json"))
	var spec specs.Spec
	if err == nil {
		err = json.Unmarshal(js, &spec)
	}
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	bad := LintSpec(&spec, s.d.flags)
	obs.Observed = fmt.Sprintf("%d findings: %s", len(bad), strings.Join(bad, "; "))
	obs.Secure = len(bad) == 0
	return obs
}

// probeMount is row 11: mount syscalls fail inside.
func probeMount(ctx context.Context, t battery.Target) battery.Observation {
	obs := battery.Observation{Tried: "mount a tmpfs and remount / inside the sandbox"}
	s, err := prepared(ctx, t)
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	defer s.Destroy(context.WithoutCancel(ctx))
	res, err := s.Run(ctx, shell(t, "mount -t tmpfs none /tmp && echo MOUNTED; mount -o remount,rw / 2>/dev/null && echo REMOUNTED; echo end"))
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	out := strings.TrimSpace(string(res.Stdout))
	obs.Observed = fmt.Sprintf("stdout %q stderr %.120q", out, res.Stderr)
	obs.Secure = out == "end"
	return obs
}

// probeCaps is row 24: no capability in the workload's effective, bounding
// or ambient sets.
func probeCaps(ctx context.Context, t battery.Target) battery.Observation {
	obs := battery.Observation{Tried: "read CapEff/CapBnd/CapAmb of the workload"}
	s, err := prepared(ctx, t)
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	defer s.Destroy(context.WithoutCancel(ctx))
	res, err := s.Run(ctx, shell(t, "grep -E '^Cap(Eff|Bnd|Amb|Prm)' /proc/self/status"))
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	out := string(res.Stdout)
	obs.Observed = strings.Join(strings.Fields(out), " ")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// gVisor shows no CapAmb line.
	obs.Secure = len(lines) == 4 || s.b.gvisor && len(lines) == 3
	for _, l := range lines {
		if !strings.HasSuffix(l, "0000000000000000") {
			obs.Secure = false
		}
	}
	return obs
}

// probeHostUIDs is row 49 from the host: two live sandboxes run on distinct
// host uids (each its own range), whatever uid they see inside.
func probeHostUIDs(ctx context.Context, t battery.Target) battery.Observation {
	obs := battery.Observation{Tried: "host reads the uid of two concurrently prepared sandboxes"}
	var uids []string
	for range 2 {
		s, err := started(ctx, t)
		if err != nil {
			obs.Observed = err.Error()
			return obs
		}
		defer s.Destroy(context.WithoutCancel(ctx))
		u := map[string]bool{}
		for _, f := range hostTasks(s) {
			u[strings.Fields(statusFields(f)["Uid"] + " ?")[0]] = true
		}
		uids = append(uids, strings.Join(slices.Sorted(maps.Keys(u)), ","))
	}
	obs.Observed = fmt.Sprintf("host uids %q", uids)
	obs.Secure = uids[0] != "" && !strings.Contains(","+uids[1]+",", ","+strings.Split(uids[0], ",")[0]+",")
	return obs
}

// shellProbe is a probe that runs script under /bin/sh in a fresh sandbox
// and judges its stdout with secure.
func shellProbe(tried, script string, secure func(out string) bool) func(context.Context, battery.Target) battery.Observation {
	return func(ctx context.Context, t battery.Target) battery.Observation {
		obs := battery.Observation{Tried: tried}
		s, err := prepared(ctx, t)
		if err != nil {
			obs.Observed = err.Error()
			return obs
		}
		defer s.Destroy(context.WithoutCancel(ctx))
		res, err := s.Run(ctx, shell(t, script))
		if err != nil {
			obs.Observed = err.Error()
			return obs
		}
		out := string(res.Stdout)
		obs.Observed = fmt.Sprintf("%.300q", out)
		obs.Secure = res.Class == sandbox.OK && secure(out)
		return obs
	}
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 1 << 30
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// declaredMounts are the mount points a sandbox may have: the spec's, and
// the masked/read-only kernel paths the runtime mounts over.
func declaredMount(mp string) bool {
	switch mp {
	case "/", "/proc", "/dev", "/dev/pts", "/dev/shm", "/dev/mqueue", "/sys", "/sys/fs/cgroup", "/tmp", agentPath, runnerPath, resolvConf,
		"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/console", "/workspace",
		bootIDPath, machineIDPath: // a golden's and its clones' identity (snapshot_identity.go)
		return true
	}
	return slices.Contains(maskedPaths, mp) || slices.Contains(readonlyPaths, mp) ||
		strings.HasPrefix(mp, "/sys/fs/cgroup/")
}

func onlyDeclaredMounts(out string) bool {
	f := strings.Fields(out)
	for _, mp := range f {
		if !declaredMount(mp) {
			return false
		}
	}
	return len(f) > 0
}

// minimalDev: only the standard devices (gVisor adds its own fuse and
// net/tun), no readable memory or disk node, no kvm.
func minimalDev(out string) bool {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || lines[1] != "end" {
		return false
	}
	allowed := []string{"console", "core", "fd", "full", "mqueue", "null", "ptmx", "pts", "random", "shm",
		"stderr", "stdin", "stdout", "tty", "urandom", "zero", "fuse", "net"}
	for _, d := range strings.Fields(lines[0]) {
		if !slices.Contains(allowed, d) {
			return false
		}
	}
	return true
}

// retryLostSandbox runs a probe again, once, when its sandbox itself failed
// (the runtime lost the agent: seen rarely with runsc under heavy load).
// That is no observation about isolation either way; the second run's is,
// and the record says a retry happened.
func retryLostSandbox(run func(context.Context, battery.Target) battery.Observation) func(context.Context, battery.Target) battery.Observation {
	return func(ctx context.Context, t battery.Target) battery.Observation {
		o := run(ctx, t)
		if o.Secure || !strings.Contains(o.Observed, string(sandbox.BackendFailure)) || ctx.Err() != nil {
			return o
		}
		o2 := run(ctx, t)
		o2.Observed = fmt.Sprintf("retried once after a sandbox failure (%s): %s", o.Observed, o2.Observed)
		return o2
	}
}

// templatePrerequisite is the battery's need for the template its probes
// run in (the hostile-image probe also copies busybox out of it).
func templatePrerequisite(b *Backend, name string) battery.Prerequisite {
	return battery.Prerequisite{What: "template " + name, Check: func() error {
		if !image.Exists(b.imagesDir(), name) {
			return fmt.Errorf("no template %q to test with: build it with `wovyr image build %s`", name, name)
		}
		return nil
	}}
}

// noSandboxLayout is row 93's verdict on a sandbox's mount tables: they
// were read (the root mount is there), they name no path of this node's
// sandbox scratch layout (StateDir/run/oci/sb/…), and every overlay layer
// is named by a descriptor, not by its host path (mounts.go, mountOverlay).
func noSandboxLayout(b *Backend, out string) bool {
	root := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		root = root || len(f) > 4 && f[4] == "/"
		for _, opt := range strings.Split(line, ",") {
			for _, key := range []string{"lowerdir=", "upperdir=", "workdir="} {
				if i := strings.Index(opt, key); i >= 0 && !strings.HasPrefix(opt[i+len(key):], "/proc/self/fd/") {
					return false
				}
			}
		}
	}
	return root && !strings.Contains(out, filepath.Join(b.run, "sb"))
}
