package vmm_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/cgroup"
	"github.com/wovyr/wovyr/internal/vmtest"
	"github.com/wovyr/wovyr/vmm"
)

var env vmtest.Builder

func TestMain(m *testing.M) {
	code := m.Run()
	env.Cleanup()
	os.Exit(code)
}

const testUID = 65534 // nobody: an unprivileged uid that exists everywhere

func markerSpec(im interface {
	Vmlinux() string
	Initramfs() string
}, id string) *vmm.Spec {
	return &vmm.Spec{
		ID: id, Kernel: im.Vmlinux(), Initrd: im.Initramfs(), Accel: vmm.TCG,
		Cmdline: "console=ttyS0 panic=-1 tsc_early_khz=2600000 tsc=reliable quiet " + agent.CmdlineMode + "=" + agent.ModeMarker,
		Memory:  128 << 20, UID: testUID, GID: testUID,
		Limits: vmm.Limits{Memory: 512 << 20, Pids: 64, CPUs: 1},
	}
}

func TestArgsAreHardened(t *testing.T) {
	q := &vmm.QEMU{}
	s := &vmm.Spec{ID: "x", Kernel: "/k", Accel: vmm.TCG, UID: 1, Limits: vmm.Limits{Unlimited: true},
		Disks: []vmm.Disk{{Path: "/r", Serial: "wovyr-root", ReadOnly: true}, {Path: "/s", Serial: "wovyr-scratch"}},
		Ports: []vmm.Port{{Name: "wovyr.ctl"}}}
	a := q.Args(s)
	joined := strings.Join(a, " ")
	for _, want := range []string{"-nodefaults", "-no-user-config", "-sandbox " + vmm.SandboxOpts,
		"file=/dev/fdset/1,format=raw,if=none,discard=ignore,cache=unsafe,readonly=on", "file=/dev/fdset/2,format=raw,if=none,discard=ignore,cache=unsafe,readonly=off",
		"-kernel /proc/self/fd/3", "socket,id=p0,fd=7"} {
		if !strings.Contains(joined, want) {
			t.Errorf("args lack %q: %s", want, joined)
		}
	}
	for _, bad := range []string{"-netdev", "-nic", "-net", "-monitor", "-qmp", "-gdb"} {
		if slices.Contains(a, bad) {
			t.Errorf("args contain %s: %s", bad, joined)
		}
	}
	s.UID = 0
	if err := s.Validate(); err == nil {
		t.Error("a root VMM was accepted without AllowRoot")
	}
	s.UID, s.Limits = 1, vmm.Limits{}
	if err := s.Validate(); err == nil {
		t.Error("a VMM without limits was accepted")
	}
}

// TestBootUnprivilegedAndConfined boots the marker guest hardened and checks
// the VMM's posture from the host, then that nothing is left.
func TestBootUnprivilegedAndConfined(t *testing.T) {
	e := env.Get(t)
	q := &vmm.QEMU{}
	m, err := q.Start(context.Background(), markerSpec(e.Image, "test-boot"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Kill()
	proc := filepath.Join("/proc", itoa(m.Pid()))
	for i := 0; i < 1000; i++ { // until prlimit has exec'd QEMU
		if exe, _ := os.Readlink(filepath.Join(proc, "exe")); strings.Contains(exe, "qemu") {
			break
		}
		time.Sleep(time.Millisecond)
	}
	limits, _ := os.ReadFile(filepath.Join(proc, "limits"))
	if !regexp.MustCompile(`Max open files\s+256\s+256`).Match(limits) || !regexp.MustCompile(`Max file size\s+1048576\s+1048576`).Match(limits) {
		t.Errorf("VMM rlimits not set:\n%s", limits)
	}
	status, err := os.ReadFile(filepath.Join(proc, "status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Uid:\t65534\t65534\t65534\t65534", "Gid:\t65534\t65534\t65534\t65534", "CapEff:\t0000000000000000"} {
		if !strings.Contains(string(status), want) {
			t.Errorf("VMM status lacks %q:\n%s", want, status)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := m.Wait(ctx); err != nil {
		t.Fatalf("wait: %v\nconsole:\n%s", err, m.Console())
	}
	if !strings.Contains(string(m.Console()), agent.ReadyMarker) {
		t.Fatalf("no ready marker; console:\n%s", m.Console())
	}
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	if cgroup.Exists(vmm.CgroupPath("wovyr-test-boot")) {
		t.Errorf("cgroup %s survives", vmm.CgroupPath("wovyr-test-boot"))
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
