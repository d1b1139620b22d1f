package microvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/cgroup"
	"github.com/wovyr/wovyr/internal/vmtest"
	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/vmm"
)

var env vmtest.Builder

func TestMain(m *testing.M) {
	code := m.Run()
	env.Cleanup()
	if shared.state != "" {
		os.RemoveAll(shared.state)
	}
	os.Exit(code)
}

// shared is one probed backend for the package's tests: a probe boots two
// guests under TCG, so it is done once.
var shared struct {
	sync.Once
	b     *Backend
	state string
}

func backend(t testing.TB) *Backend {
	t.Helper()
	e := env.Get(t)
	shared.Do(func() {
		shared.state, _ = os.MkdirTemp("", "wovyr-microvm-state-")
		os.Chmod(shared.state, 0o700)
		b, err := New(Config{StateDir: shared.state, ImageDir: e.Image.Dir})
		if err != nil {
			t.Fatal(err)
		}
		shared.b = b
	})
	if shared.b == nil {
		t.Fatal("backend setup failed earlier")
	}
	if c := shared.b.Probe(context.Background()); !c.Available {
		t.Fatalf("probe: %s", c.Reason)
	}
	return shared.b
}

// sibling returns a backend sharing b's probe but with other settings.
func sibling(t testing.TB, b *Backend, mod func(*Config)) *Backend {
	c := b.cfg
	mod(&c)
	nb := &Backend{cfg: c, disks: newDisks(disksDir(c.StateDir), c.TemplatesDir, c.Logger)}
	nb.probe = b.probe
	return nb
}

func inv(argv ...string) *sandbox.Invocation {
	return &sandbox.Invocation{
		ID: "t1", Tenant: "acme",
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: argv},
		Policy:   sandbox.Policy{Trust: sandbox.Hostile},
	}
}

// assertClean checks that nothing of the VMs whose names start with prefix
// survives: no per-VM directory, no cgroup, no QEMU process.
func assertClean(t *testing.T, b *Backend, prefix string) {
	t.Helper()
	left, _ := filepath.Glob(filepath.Join(vmsDir(b.cfg.StateDir), prefix+"*"))
	if len(left) > 0 {
		t.Errorf("files survive: %v", left)
	}
	for _, ctl := range []string{"memory", "pids", "cpu", ""} {
		cgs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", ctl, vmm.CgroupParent, prefix+"*"))
		if len(cgs) > 0 {
			t.Errorf("cgroups survive: %v", cgs)
		}
	}
	if ps := vmmProcesses(func(n string) bool { return strings.HasPrefix(n, prefix) }); len(ps) > 0 {
		t.Errorf("QEMU processes survive: %v", ps)
	}
}

// vmName is the name a sandbox's VM carries everywhere on the host.
func vmName(s sandbox.Sandbox) string { return "wovyr-vm-" + s.(*vmSandbox).id }

func TestProbeFallsBackToWorkingAccel(t *testing.T) {
	b := backend(t)
	c := b.Probe(context.Background())
	if !c.Available || c.Egress || (c.Accel != "tcg" && c.Accel != "kvm") || c.ConfigHash == "" {
		t.Fatalf("capability %+v", c)
	}
	if !strings.HasPrefix(c.Version, "qemu ") {
		t.Errorf("version %q", c.Version)
	}
	t.Logf("accel=%s features=%v", c.Accel, c.Features)
	assertClean(t, b, "wovyr-probe-")
}

func TestOneShotGuestKernelStdinEnvExit(t *testing.T) {
	b := backend(t)
	ctx := context.Background()
	s, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy(ctx)
	in := inv("/bin/sh", "-c", `uname -r; cat; echo "[$FOO]"; pwd; echo err >&2; exit 7`)
	in.Workload.Stdin = []byte("from-stdin\n")
	in.Workload.Env = []string{"FOO=bar baz", "PATH=/bin:/usr/bin"}
	res, err := s.Run(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := exec.Command("uname", "-r").Output()
	want := b.probe.image.KernelRelease + "\nfrom-stdin\n[bar baz]\n/workspace\n"
	if string(res.Stdout) != want || string(res.Stderr) != "err\n" || res.ExitCode != 7 || res.Class != sandbox.OK {
		t.Fatalf("got stdout %q stderr %q exit %d class %q (%s), want %q exit 7", res.Stdout, res.Stderr, res.ExitCode, res.Class, res.Error, want)
	}
	if strings.TrimSpace(string(host)) == b.probe.image.KernelRelease {
		t.Fatalf("guest release equals the host's (%s): the test proves nothing here", host)
	}
	if res.Accel != string(b.probe.accel) || res.Backend != "microvm" {
		t.Errorf("accel %q backend %q", res.Accel, res.Backend)
	}
	if _, err := s.Run(ctx, in); sandbox.ClassOf(err) != sandbox.BackendFailure {
		t.Errorf("second run on a spent sandbox: %v", err)
	}
	if err := s.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	assertClean(t, b, vmName(s))
}

// TestOneShotHungGuestKilledAtDeadline boots a guest whose init is a shell
// waiting on the console: it never answers, and must be killed at wall +
// boot allowance, classed timeout.
func TestOneShotHungGuestKilledAtDeadline(t *testing.T) {
	b := sibling(t, backend(t), func(c *Config) {
		c.ExtraCmdline = "rdinit=/bin/sh"
		c.BootTimeout = 3 * time.Second
	})
	ctx := context.Background()
	s, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy(ctx)
	in := inv("/bin/true")
	in.Limits.Wall = time.Second
	start := time.Now()
	res, err := s.Run(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if res.Class != sandbox.Timeout || res.Signal != "killed" {
		t.Fatalf("class %q signal %q (%s), want timeout killed", res.Class, res.Signal, res.Error)
	}
	if el := time.Since(start); el < 4*time.Second {
		t.Fatalf("killed after %s, before the 4s deadline", el)
	}
	s.Destroy(ctx)
	assertClean(t, b, vmName(s))
}

// TestWarmOOMInsideGuest runs over the warm control channel a job that
// outgrows its memory limit: the guest's cgroup kills it, classed oom, and
// output before that survives.
func TestWarmOOMInsideGuest(t *testing.T) {
	b := sibling(t, backend(t), func(c *Config) { c.Warm = true })
	ctx := context.Background()
	s, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand, Limits: sandbox.Limits{Memory: 32 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy(ctx)
	in := inv("/bin/sh", "-c", "echo start; exec tail /dev/zero")
	in.Limits.Memory = 32 << 20
	res, err := s.Run(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if res.Class != sandbox.OOM || string(res.Stdout) != "start\n" {
		t.Fatalf("class %q stdout %q exit %d signal %q (%s), want oom after start", res.Class, res.Stdout, res.ExitCode, res.Signal, res.Error)
	}
	if err := s.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	assertClean(t, b, vmName(s))
}

func TestRefusesWhatItCannotEnforce(t *testing.T) {
	b := backend(t)
	ctx := context.Background()
	s, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy(ctx)
	in := inv("/bin/true")
	in.Policy.Network = netpolicy.Policy{Allow: []netpolicy.Rule{{Host: "example.test", Ports: []uint16{443}}}}
	if _, err := s.Run(ctx, in); !errors.Is(err, sandbox.Unenforceable) || sandbox.FieldOf(err) != "policy.network" {
		t.Fatalf("network allow rule: %v", err)
	}
	in = inv("/bin/true")
	in.Workload.Image = "ubuntu"
	if _, err := s.Run(ctx, in); sandbox.ClassOf(err) != sandbox.BadInput {
		t.Fatalf("unknown image: %v", err)
	}
	if _, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindWasm}); sandbox.ClassOf(err) != sandbox.BadInput {
		t.Fatalf("wasm template: %v", err)
	}
	s.Destroy(ctx)
	assertClean(t, b, vmName(s))
}

func TestGarbledResultDiskIsBackendFailure(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "result.img")
	l := sandbox.Limits{}.WithDefaults()
	cases := map[string][]byte{
		"empty":     make([]byte, 4096),
		"huge":      append([]byte{0x7f, 0xff, 0xff, 0xff}, make([]byte, 4092)...),
		"truncated": append([]byte{0, 0, 0x10, 0}, []byte(`{"id":"t1"`)...),
		"not json":  append([]byte{0, 0, 0, 5}, []byte("\x00\x01\x02\x03\x04")...),
	}
	for name, data := range cases {
		os.WriteFile(p, data, 0o600)
		_, err := readResultDisk(p)
		if err == nil {
			t.Errorf("%s: garbled disk accepted", name)
		}
	}
	var res sandbox.Result
	os.WriteFile(p, append([]byte{0, 0, 0, 12}, []byte(`{"id":"x99"}`)...), 0o600)
	rep, err := readResultDisk(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := fillResult(&res, rep, "t1", l); sandbox.ClassOf(err) != sandbox.BackendFailure {
		t.Errorf("reply for another job: %v", err)
	}
	rep.ID, rep.Stdout = "t1", bytes.Repeat([]byte("x"), int(l.Output)+1)
	if err := fillResult(&res, rep, "t1", l); sandbox.ClassOf(err) != sandbox.BackendFailure {
		t.Errorf("over-cap output: %v", err)
	}
}

func TestReconcileRemovesLeftovers(t *testing.T) {
	state := t.TempDir()
	name := "wovyr-vm-leftover" + randomID()
	vmdir := filepath.Join(vmsDir(state), name)
	os.MkdirAll(vmdir, 0o700)
	os.WriteFile(filepath.Join(vmdir, "scratch.ext4"), []byte("x"), 0o600)
	other := filepath.Join(vmsDir(state), "not-ours")
	os.MkdirAll(other, 0o700)
	g, err := cgroup.New(vmm.CgroupPath(name), cgroup.Limits{Pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleeper.Process.Kill()
	if err := g.Add(sleeper.Process.Pid); err != nil {
		t.Fatal(err)
	}
	// A VM of another state directory, which must survive.
	foreign := "wovyr-vm-foreign" + randomID()
	fg, err := cgroup.New(vmm.CgroupPath(foreign), cgroup.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer fg.Destroy(context.Background())
	if err := Reconcile(context.Background(), state); err != nil {
		t.Fatal(err)
	}
	if err := sleeper.Wait(); err == nil {
		t.Error("the leftover process was not killed")
	}
	if cgroup.Exists(vmm.CgroupPath(name)) {
		t.Error("leftover cgroup survives")
	}
	if _, err := os.Stat(vmdir); !os.IsNotExist(err) {
		t.Errorf("leftover VM dir survives: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("reconcile removed a directory that is not its own: %v", err)
	}
	if !cgroup.Exists(vmm.CgroupPath(foreign)) {
		t.Error("reconcile removed another state directory's VM cgroup")
	}
}

// TestCertify runs the battery's microVM probes with their positive
// controls (five boots).
func TestCertify(t *testing.T) {
	b := backend(t)
	recs, err := Certify(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[int]bool{}
	for _, r := range recs {
		ids[r.Probe] = true
		t.Logf("probe %d %s: pass=%v observed=%q control=%q caught=%v waiver=%q", r.Probe, r.Name, r.Pass, r.Observed, r.Control, r.ControlCaught, r.Waiver)
		if !r.Pass && r.Waiver == "" {
			t.Errorf("probe %d (%s) failed: %s", r.Probe, r.Name, r.Observed)
		}
		if !r.ControlCaught {
			t.Errorf("probe %d (%s): the weakened control was not caught: %s", r.Probe, r.Name, r.Control)
		}
		if r.Accel != string(b.probe.accel) || r.Backend != "microvm" {
			t.Errorf("probe %d: accel %q backend %q", r.Probe, r.Accel, r.Backend)
		}
	}
	for _, id := range []int{1, 4, 5, 6, 7, 49, 52, 58, 86, 92} {
		if !ids[id] {
			t.Errorf("probe %d missing", id)
		}
	}
	assertClean(t, b, "wovyr-vm-")
	assertClean(t, b, "wovyr-probe-")
	if left, _ := filepath.Glob(filepath.Join(vmsDir(b.cfg.StateDir), "wovyr-uid-*")); len(left) > 0 {
		t.Errorf("uid claims survive: %v", left)
	}
}

// TestSuiteCoversEveryMicroVMRow: every catalogue row naming M is either
// probed or says why it does not apply, and every weakness a probe names
// yields a differently hashed backend. (battery.Run over the whole suite
// boots about ten VMs; `wovyr certify --backend microvm` runs it.)
func TestSuiteCoversEveryMicroVMRow(t *testing.T) {
	b := backend(t)
	controls := containerControls(t)
	s := Suite(b, controls)
	impl := map[int]battery.Weakness{}
	probed := map[int]bool{}
	for _, p := range s.Probes {
		probed[p.ID] = true
		if p.ControlOn != nil {
			if p.ControlOn != controls.Target.Backend {
				t.Errorf("row %d's control runs on %s, not the container suite's backend", p.ID, p.ControlOn.Name())
			}
			continue // the container's weakness, not the microVM's
		}
		impl[p.ID] = p.Weakness
	}
	applied := 0
	for _, row := range battery.Catalogue() {
		if probed[row.ID] && names(row.Backends, "M") {
			applied++
		}
	}
	if applied < 40 {
		t.Errorf("the microVM applies %d probes, want at least 40 (issue #24)", applied)
	}
	for _, row := range battery.Catalogue() {
		probed := probed[row.ID]
		_, na := s.NotApplicable[row.ID]
		if probed && na {
			t.Errorf("row %d is both probed and not applicable", row.ID)
		}
		if names(row.Backends, "M") && !probed && !na {
			t.Errorf("row %d (%s) names microvm but is neither probed nor explained", row.ID, row.Name)
		}
	}
	seen := map[string]battery.Weakness{b.Probe(context.Background()).ConfigHash: ""}
	for _, w := range impl {
		wb, err := b.Weakened(w)
		if err != nil {
			t.Fatalf("weakness %s: %v", w, err)
		}
		h := wb.Probe(context.Background()).ConfigHash
		if prev, dup := seen[h]; dup && prev != w {
			t.Errorf("weakness %q has the config hash of %q", w, prev)
		}
		seen[h] = w
	}
	if _, err := b.Weakened("no-such-weakness"); err == nil {
		t.Error("an unknown weakness was accepted")
	}
}

func names(backends, letter string) bool {
	for _, p := range strings.Split(backends, ",") {
		if p = strings.TrimSpace(p); p == letter || p == "all" || (p == "L" && letter != "W") {
			return true
		}
	}
	return false
}

// TestJobBornInItsCgroup: the job starts inside the guest's job cgroup
// (clone3 into it: nothing migrates) while the agent, the guest's init,
// stays outside, in one-shot and warm VMs alike.
func TestJobBornInItsCgroup(t *testing.T) {
	for _, warm := range []bool{false, true} {
		b := sibling(t, backend(t), func(c *Config) { c.Warm = warm })
		ctx := context.Background()
		s, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Run(ctx, inv("/bin/cat", "/proc/self/cgroup", "/proc/1/cgroup"))
		if derr := s.Destroy(ctx); derr != nil {
			t.Error(derr)
		}
		if err != nil {
			t.Fatal(err)
		}
		if want := "0::/wovyr-job\n0::/\n"; string(res.Stdout) != want {
			t.Errorf("warm=%v: cgroups %q (stderr %q), want %q", warm, res.Stdout, res.Stderr, want)
		}
		assertClean(t, b, vmName(s))
	}
}

// TestVMCPUQuota: a VM's host cgroup allows its vCPUs plus vmmCPU of a
// core for QEMU's own threads (with a quota of exactly its vCPUs, QEMU's
// main loop cost a one-shot VM 70–210 ms of throttling), read from the
// live VM's cgroup.
func TestVMCPUQuota(t *testing.T) {
	for _, vcpus := range []int{1, 2} {
		b := sibling(t, backend(t), func(c *Config) { c.Warm, c.VCPUs = true, vcpus })
		ctx := context.Background()
		s, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
		if err != nil {
			t.Fatal(err)
		}
		cores, err := cpuQuota(vmm.CgroupPath(vmName(s)))
		if derr := s.Destroy(ctx); derr != nil {
			t.Error(derr)
		}
		if err != nil {
			t.Fatal(err)
		}
		if want := float64(vcpus) + 0.25; cores != want {
			t.Errorf("%d vCPUs: the VM's cgroup allows %v cores, want %v", vcpus, cores, want)
		}
		assertClean(t, b, vmName(s))
	}
}

// cpuQuota is the CPU bandwidth of the cgroup at rel, in cores (v1 or v2).
func cpuQuota(rel string) (float64, error) {
	if b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", rel, "cpu.max")); err == nil {
		var quota, period float64
		if _, err := fmt.Sscan(string(b), &quota, &period); err != nil {
			return 0, fmt.Errorf("cpu.max %q: %w", b, err)
		}
		return quota / period, nil
	}
	var v [2]float64
	for i, f := range []string{"cpu.cfs_quota_us", "cpu.cfs_period_us"} {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpu", rel, f))
		if err != nil {
			return 0, err
		}
		if _, err := fmt.Sscan(string(b), &v[i]); err != nil {
			return 0, fmt.Errorf("%s %q: %w", f, b, err)
		}
	}
	return v[0] / v[1], nil
}
