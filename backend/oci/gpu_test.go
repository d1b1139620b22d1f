package oci

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/wovyr/wovyr/gpu"
	"github.com/wovyr/wovyr/idmap"
	"github.com/wovyr/wovyr/sandbox"
)

func gpuTestSpec(t *testing.T) *specs.Spec {
	t.Helper()
	s, err := buildSpec(specParams{rootfs: "/", agent: agentPath, cgroups: "/wovyr/_pool/x",
		ids: idmap.Range{HostUID: 1, HostGID: 1, Size: rangeSize}, limits: sandbox.Limits{}.WithDefaults()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testGPU(uuid string, minor int64) sandbox.GPUDevice {
	return sandbox.GPUDevice{UUID: uuid, Nodes: []sandbox.DeviceNode{
		{Path: fmt.Sprintf("/dev/nvidia%d", minor), Major: 195, Minor: minor},
		{Path: "/dev/nvidiactl", Major: 195, Minor: 255},
		{Path: "/dev/nvidia-uvm", Major: 510, Minor: 0},
	}}
}

// TestGPUSpecEdits: a container spec for assigned GPUs gains exactly their
// device nodes (the shared control nodes once), each allow-listed by
// major:minor after the device cgroup's deny-all, and its environment names
// exactly their UUIDs, whatever NVIDIA_VISIBLE_DEVICES it had; without
// GPUs nothing changes.
func TestGPUSpecEdits(t *testing.T) {
	plain := gpuTestSpec(t)
	untouched := gpuTestSpec(t)
	gpuEdits(nil).apply(untouched)
	if !reflect.DeepEqual(plain, untouched) {
		t.Fatal("edits without GPUs changed the spec")
	}

	s := gpuTestSpec(t)
	s.Process.Env = append(s.Process.Env, "NVIDIA_VISIBLE_DEVICES=all", "CUDA_VISIBLE_DEVICES=0,1,2,3")
	gpuEdits([]sandbox.GPUDevice{testGPU("GPU-b", 3), testGPU("GPU-a", 1)}).apply(s)
	var nodes []string
	for _, d := range s.Linux.Devices[len(plain.Linux.Devices):] {
		nodes = append(nodes, fmt.Sprintf("%s %s %d:%d %o", d.Path, d.Type, d.Major, d.Minor, *d.FileMode))
	}
	if want := "[/dev/nvidia3 c 195:3 660 /dev/nvidiactl c 195:255 660 /dev/nvidia-uvm c 510:0 660 /dev/nvidia1 c 195:1 660]"; fmt.Sprint(nodes) != want {
		t.Fatalf("device nodes %v\nwant %s", nodes, want)
	}
	var rules []string
	for _, r := range s.Linux.Resources.Devices {
		major, minor := int64(-1), int64(-1)
		if r.Major != nil {
			major, minor = *r.Major, *r.Minor
		}
		rules = append(rules, fmt.Sprintf("%v %s %d:%d %s", r.Allow, r.Type, major, minor, r.Access))
	}
	if want := "[false  -1:-1 rwm true c 195:3 rw true c 195:255 rw true c 510:0 rw true c 195:1 rw]"; fmt.Sprint(rules) != want {
		t.Fatalf("device cgroup %v\nwant %s", rules, want)
	}
	env := s.Process.Env[len(plain.Process.Env):]
	if want := "[NVIDIA_VISIBLE_DEVICES=GPU-b,GPU-a CUDA_VISIBLE_DEVICES=GPU-b,GPU-a]"; fmt.Sprint(env) != want {
		t.Fatalf("env %v, want %s", env, want)
	}
}

// TestNvproxyFlag: runsc's nvproxy flag is found in `runsc flags` output,
// not mistaken for its longer siblings.
func TestNvproxyFlag(t *testing.T) {
	with := "  -network string\n  -nvproxy\n    \tEXPERIMENTAL: enable support for Nvidia GPUs\n  -nvproxy-docker\n"
	without := "  -network string\n  -nvproxy-docker\n  -nvproxy-driver-version string\n"
	if !nvproxyFlag.MatchString(with) || nvproxyFlag.MatchString(without) {
		t.Fatalf("nvproxy flag detection: with %v, without %v", nvproxyFlag.MatchString(with), nvproxyFlag.MatchString(without))
	}
}

// TestGPUSupportHere: on a node without the NVIDIA driver the container
// cannot give GPUs and gVisor says why (its runsc's nvproxy, then the
// driver); on a GPU node it skips.
func TestGPUSupportHere(t *testing.T) {
	if hostDriver() == nil {
		t.Skip("this node has the NVIDIA driver")
	}
	for name, b := range newBackends(t) {
		err := b.GPUSupport(context.Background())
		want := "no NVIDIA driver on this node"
		if name == "gvisor" {
			if d, _ := b.chosen(context.Background()); d != nil && d.nvproxy {
				want = "runsc nvproxy unavailable: no NVIDIA driver on this node"
			} else if d != nil {
				want = "runsc nvproxy unavailable: " + d.version + " has no --nvproxy flag"
			}
		}
		if err == nil || err.Error() != want {
			t.Errorf("%s: GPUSupport %v, want %q", name, err, want)
		}
	}
}

// TestSameGPUs: a sandbox serves only an invocation holding exactly its
// devices, in order.
func TestSameGPUs(t *testing.T) {
	a, b := testGPU("GPU-a", 0), testGPU("GPU-b", 1)
	for _, c := range []struct {
		x, y []sandbox.GPUDevice
		want bool
	}{{nil, nil, true}, {[]sandbox.GPUDevice{a}, nil, false}, {nil, []sandbox.GPUDevice{a}, false},
		{[]sandbox.GPUDevice{a, b}, []sandbox.GPUDevice{a, b}, true}, {[]sandbox.GPUDevice{a, b}, []sandbox.GPUDevice{b, a}, false}} {
		if got := sameGPUs(c.x, c.y); got != c.want {
			t.Errorf("sameGPUs(%v, %v) = %v", c.x, c.y, got)
		}
	}
}

// TestNVProxySupport: gVisor gives GPUs iff its runsc has --nvproxy and
// the NVIDIA driver is here, and says which is missing, in that order.
func TestNVProxySupport(t *testing.T) {
	noDriver := errors.New("no NVIDIA driver on this node")
	for _, c := range []struct {
		nvproxy bool
		driver  error
		want    string
	}{
		{false, nil, "runsc nvproxy unavailable: runsc version 2022 has no --nvproxy flag"},
		{false, noDriver, "runsc nvproxy unavailable: runsc version 2022 has no --nvproxy flag"},
		{true, noDriver, "runsc nvproxy unavailable: no NVIDIA driver on this node"},
		{true, nil, ""},
	} {
		err := nvproxySupport(c.nvproxy, "runsc version 2022", c.driver)
		if got := fmt.Sprint(err); (c.want == "" && err != nil) || (c.want != "" && got != c.want) {
			t.Errorf("nvproxy=%v driver=%v: %v, want %q", c.nvproxy, c.driver, err, c.want)
		}
	}
}

// TestNVProxyArgv: a GPU sandbox's runsc calls carry --nvproxy (once,
// after the global flags, never --nvproxy-docker); the driver it was made
// from, which every other sandbox uses, is unchanged.
func TestNVProxyArgv(t *testing.T) {
	d := &driver{name: "runsc", path: "/usr/bin/runsc", root: "/run/wovyr/state/runsc", flags: runscFlags("systrap")}
	g := d.withNVProxy()
	global := "--root /run/wovyr/state/runsc --platform=systrap --network=none --oci-seccomp --overlay2=none"
	for _, c := range []struct {
		cmd  *exec.Cmd
		want string
	}{
		{g.createCommand("/b", "wovyr-g-1"), "/usr/bin/runsc " + global + " --nvproxy create --bundle /b wovyr-g-1"},
		{g.runDetachedCommand("/b", "wovyr-g-1"), "/usr/bin/runsc " + global + " --nvproxy run --detach --bundle /b wovyr-g-1"},
		{g.command("kill", "wovyr-g-1", "KILL"), "/usr/bin/runsc " + global + " --nvproxy kill wovyr-g-1 KILL"},
		{g.netstack().command("exec", "wovyr-g-1"), "/usr/bin/runsc --root /run/wovyr/state/runsc --platform=systrap --network=sandbox --oci-seccomp --overlay2=none --nvproxy exec wovyr-g-1"},
		{d.createCommand("/b", "wovyr-g-2"), "/usr/bin/runsc " + global + " create --bundle /b wovyr-g-2"},
	} {
		if got := strings.Join(c.cmd.Args, " "); got != c.want {
			t.Errorf("argv %q\nwant %q", got, c.want)
		}
	}
	if bad := LintSpec(gpuTestSpec(t), g.flags); len(bad) != 0 {
		t.Errorf("the lint flags the nvproxy driver: %v", bad)
	}
}

// TestGVisorGPUSpec: a gVisor GPU spec gains exactly the container's
// edits — the assigned nodes, their device-cgroup rules, the UUIDs as the
// only device selection — and MIG instances, which nvproxy cannot give,
// are refused by name.
func TestGVisorGPUSpec(t *testing.T) {
	mk := func(gvisor bool) *specs.Spec {
		s, err := buildSpec(specParams{rootfs: "/", agent: agentPath, cgroups: "/wovyr/_pool/x", gvisor: gvisor,
			ids: idmap.Range{HostUID: 1, HostGID: 1, Size: rangeSize}, limits: sandbox.Limits{}.WithDefaults()})
		if err != nil {
			t.Fatal(err)
		}
		s.Process.Env = append(s.Process.Env, "NVIDIA_VISIBLE_DEVICES=all")
		return s
	}
	gpus := []sandbox.GPUDevice{testGPU("GPU-a", 2)}
	if err := nvproxyDevices(gpus); err != nil {
		t.Fatal(err)
	}
	c, g := mk(false), mk(true)
	nc, ng := len(c.Linux.Devices), len(g.Linux.Devices)
	rc, rg := len(c.Linux.Resources.Devices), len(g.Linux.Resources.Devices)
	gpuEdits(gpus).apply(c)
	gpuEdits(gpus).apply(g)
	if !reflect.DeepEqual(c.Linux.Devices[nc:], g.Linux.Devices[ng:]) || len(g.Linux.Devices)-ng != 3 ||
		!reflect.DeepEqual(c.Linux.Resources.Devices[rc:], g.Linux.Resources.Devices[rg:]) {
		t.Fatalf("gVisor's GPU edits differ from the container's:\n%+v\n%+v", g.Linux.Devices[ng:], c.Linux.Devices[nc:])
	}
	var sel []string
	for _, kv := range g.Process.Env {
		if strings.HasPrefix(kv, "NVIDIA_VISIBLE_DEVICES=") || strings.HasPrefix(kv, "CUDA_VISIBLE_DEVICES=") {
			sel = append(sel, kv)
		}
	}
	if want := "[NVIDIA_VISIBLE_DEVICES=GPU-a CUDA_VISIBLE_DEVICES=GPU-a]"; fmt.Sprint(sel) != want {
		t.Fatalf("gVisor env selection %v, want %s", sel, want)
	}
	mig := testGPU("MIG-a", 0)
	mig.Nodes = append(mig.Nodes, sandbox.DeviceNode{Path: "/dev/nvidia-caps/nvidia-cap12", Major: 237, Minor: 12})
	err := nvproxyDevices([]sandbox.GPUDevice{gpus[0], mig})
	if want := "runsc nvproxy gives whole GPUs only: MIG-a needs /dev/nvidia-caps/nvidia-cap12"; fmt.Sprint(err) != want {
		t.Fatalf("MIG under gVisor: %v, want %s", err, want)
	}
}

// TestGPUSandboxSeesOnlyItsDevice is the device check on a node with an
// NVIDIA GPU (scripts/gpu-check runs it): a container, and gVisor where
// its runsc has nvproxy, holding the first NVML device sees exactly that
// device's nodes and its UUID as the only selection, whatever the
// invocation asked for. It skips, saying so, without the driver.
func TestGPUSandboxSeesOnlyItsDevice(t *testing.T) {
	if err := hostDriver(); err != nil {
		t.Skipf("no GPU here: %v", err)
	}
	inv, err := gpu.OpenNVML("")
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	devs, err := inv.Devices(context.Background())
	if err != nil || len(devs) == 0 {
		t.Fatalf("NVML devices: %v %v", devs, err)
	}
	d := devs[0]
	assigned := []sandbox.GPUDevice{{UUID: d.UUID, Nodes: d.Nodes, PCI: d.PCI}}
	var want []string
	for _, n := range d.Nodes {
		want = append(want, n.Path)
	}
	slices.Sort(want)
	for name, b := range newBackends(t) {
		if err := b.GPUSupport(context.Background()); err != nil {
			t.Logf("%s: no GPUs: %v", name, err)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		sb, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand, GPUs: assigned})
		if err != nil {
			cancel()
			t.Fatalf("%s: %v", name, err)
		}
		res, err := sb.Run(ctx, &sandbox.Invocation{ID: sandbox.NewID(), Tenant: "gpu-check", Policy: sandbox.Policy{Trust: sandbox.Trusted}, GPUs: assigned,
			Workload: sandbox.Workload{Kind: sandbox.KindCommand, Env: []string{"NVIDIA_VISIBLE_DEVICES=all"},
				Argv: []string{"/bin/sh", "-c", `ls -d /dev/nvidia* /dev/nvidia-caps/* 2>/dev/null | sort | tr '\n' ' '; echo "| $NVIDIA_VISIBLE_DEVICES $CUDA_VISIBLE_DEVICES"`}}})
		sb.Destroy(context.WithoutCancel(ctx))
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := strings.TrimSpace(string(res.Stdout))
		t.Logf("%s holding %s sees: %s", name, d.UUID, got)
		if exp := strings.Join(want, " ") + " | " + d.UUID + " " + d.UUID; got != exp {
			t.Errorf("%s sees %q, want %q (stderr %s)", name, got, exp, res.Stderr)
		}
	}
}
