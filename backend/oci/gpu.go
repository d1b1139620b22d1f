package oci

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/sandbox"
)

// nvidiaCtl is the NVIDIA driver's control node: present iff the driver is
// loaded on this node.
const nvidiaCtl = "/dev/nvidiactl"

// nvproxyFlag finds runsc's --nvproxy in `runsc flags`.
var nvproxyFlag = regexp.MustCompile(`(?m)^\s*-nvproxy\s*$`)

// GPUSupport implements sandbox.GPUProvider. A container gets exactly its
// assigned device nodes in its spec (gpuEdits), so it needs the NVIDIA
// driver on this node. gVisor gets the same nodes in its spec and runs
// with --nvproxy (the Sentry proxies the application's driver calls to the
// host driver): it needs a runsc with that flag and the driver.
func (b *Backend) GPUSupport(ctx context.Context) error {
	d, err := b.chosen(ctx)
	if err != nil {
		return errors.New("runtime unavailable")
	}
	if b.gvisor {
		return nvproxySupport(d.nvproxy, d.version, hostDriver())
	}
	return hostDriver()
}

// nvproxySupport is gVisor's GPU answer: nil iff this runsc has --nvproxy
// and the driver is here (driver nil).
func nvproxySupport(nvproxy bool, version string, driver error) error {
	switch {
	case !nvproxy:
		return fmt.Errorf("runsc nvproxy unavailable: %s has no --nvproxy flag", version)
	case driver != nil:
		return fmt.Errorf("runsc nvproxy unavailable: %w", driver)
	}
	return nil
}

// withNVProxy is d for a GPU sandbox under gVisor: every runsc call gets
// --nvproxy. Never --nvproxy-docker: that injects NVIDIA's prestart hook,
// which selects devices from NVIDIA_VISIBLE_DEVICES (the workload's own
// say) and mounts host driver files into the root; the devices here are
// the spec's, the assigned ones alone.
func (d *driver) withNVProxy() *driver {
	n := *d
	n.flags = append(slices.Clone(d.flags), "--nvproxy")
	return &n
}

// nvproxyNode matches the device nodes nvproxy serves: whole GPUs and the
// control nodes. It gives no MIG instance (no /dev/nvidia-caps node).
var nvproxyNode = regexp.MustCompile(`^/dev/(nvidia[0-9]+|nvidiactl|nvidia-uvm)$`)

// nvproxyDevices refuses devices gVisor's nvproxy cannot give: a MIG
// instance's capability nodes would either be refused by runsc at start or
// leave the workload the whole parent GPU's node alone.
func nvproxyDevices(gpus []sandbox.GPUDevice) error {
	for _, g := range gpus {
		for _, n := range g.Nodes {
			if !nvproxyNode.MatchString(n.Path) {
				return fmt.Errorf("runsc nvproxy gives whole GPUs only: %s needs %s", g.UUID, n.Path)
			}
		}
	}
	return nil
}

// hostDriver is nil when the NVIDIA driver's control node exists here.
func hostDriver() error {
	st, err := os.Stat(nvidiaCtl)
	if err != nil || st.Mode()&fs.ModeCharDevice == 0 {
		return errors.New("no NVIDIA driver on this node")
	}
	return nil
}

// containerEdits is the CDI (Container Device Interface) containerEdits
// shape: what a spec gains for a set of devices.
type containerEdits struct {
	Env         []string        `json:"env,omitempty"`
	DeviceNodes []cdiDeviceNode `json:"deviceNodes,omitempty"`
	gpus        []sandbox.GPUDevice
}

type cdiDeviceNode struct {
	Path        string `json:"path"`
	Type        string `json:"type"`
	Major       int64  `json:"major"`
	Minor       int64  `json:"minor"`
	Permissions string `json:"permissions"`
}

// gpuEdits are the edits for exactly the assigned devices: their nodes
// (each once; control nodes are shared between devices) and the selection
// variables naming their UUIDs. No devices: no edits.
func gpuEdits(gpus []sandbox.GPUDevice) containerEdits {
	e := containerEdits{gpus: gpus}
	if len(gpus) == 0 {
		return e
	}
	e.Env = sandbox.GPUEnv(nil, gpus)
	seen := map[string]bool{}
	for _, g := range gpus {
		for _, n := range g.Nodes {
			if !seen[n.Path] {
				seen[n.Path] = true
				e.DeviceNodes = append(e.DeviceNodes, cdiDeviceNode{Path: n.Path, Type: "c", Major: n.Major, Minor: n.Minor, Permissions: "rw"})
			}
		}
	}
	return e
}

// apply adds the edits to s: each node in linux.devices and allow-listed
// by its major:minor in the device cgroup (after the spec's deny-all), and
// the process environment stripped of any other device selection.
func (e containerEdits) apply(s *specs.Spec) {
	if len(e.gpus) == 0 {
		return
	}
	mode := os.FileMode(0o660)
	var zero uint32
	for _, n := range e.DeviceNodes {
		s.Linux.Devices = append(s.Linux.Devices, specs.LinuxDevice{Path: n.Path, Type: n.Type, Major: n.Major, Minor: n.Minor, FileMode: &mode, UID: &zero, GID: &zero})
		s.Linux.Resources.Devices = append(s.Linux.Resources.Devices, specs.LinuxDeviceCgroup{Allow: true, Type: n.Type, Major: &n.Major, Minor: &n.Minor, Access: n.Permissions})
	}
	s.Process.Env = sandbox.GPUEnv(s.Process.Env, e.gpus)
}

// sameGPUs says a and b name the same devices in the same order.
func sameGPUs(a, b []sandbox.GPUDevice) bool {
	return slices.EqualFunc(a, b, func(x, y sandbox.GPUDevice) bool { return x.UUID == y.UUID })
}

// allHostGPUs adds every NVIDIA device node of this host to s, as
// `--gpus all` would: the AllGPUs positive control of rows 95 and 97.
func allHostGPUs(s *specs.Spec) {
	var gpus []sandbox.GPUDevice
	for _, pat := range []string{"/dev/nvidia*", "/dev/nvidia-caps/*"} {
		paths, _ := filepath.Glob(pat)
		for _, p := range paths {
			var st unix.Stat_t
			if unix.Stat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR {
				gpus = append(gpus, sandbox.GPUDevice{UUID: "all", Nodes: []sandbox.DeviceNode{{Path: p, Major: int64(unix.Major(st.Rdev)), Minor: int64(unix.Minor(st.Rdev))}}})
			}
		}
	}
	e := gpuEdits(gpus)
	e.Env = nil
	mode := os.FileMode(0o666)
	for _, n := range e.DeviceNodes {
		s.Linux.Devices = append(s.Linux.Devices, specs.LinuxDevice{Path: n.Path, Type: n.Type, Major: n.Major, Minor: n.Minor, FileMode: &mode})
		s.Linux.Resources.Devices = append(s.Linux.Resources.Devices, specs.LinuxDeviceCgroup{Allow: true, Type: n.Type, Major: &n.Major, Minor: &n.Minor, Access: "rwm"})
	}
}
