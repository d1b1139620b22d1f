package oci

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

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
