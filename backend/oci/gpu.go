package oci

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/wovyr/wovyr/sandbox"
)

// nvidiaCtl is the NVIDIA driver's control node: present iff the driver is
// loaded on this node.
const nvidiaCtl = "/dev/nvidiactl"

// nvproxyFlag finds runsc's --nvproxy in `runsc flags`.
var nvproxyFlag = regexp.MustCompile(`(?m)^\s*-nvproxy\s*$`)

// GPUSupport implements sandbox.GPUProvider. A container gets exactly its
// assigned device nodes in its spec (gpuEdits), so it needs the NVIDIA
// driver on this node. gVisor needs runsc's nvproxy and the driver, and
// even then says no: running GPU sandboxes under runsc (--nvproxy on their
// runsc calls, its own certification) is not wired in this build, and
// claiming support it does not deliver would run GPU work without GPUs.
func (b *Backend) GPUSupport(ctx context.Context) error {
	d, err := b.chosen(ctx)
	if err != nil {
		return errors.New("runtime unavailable")
	}
	driver := hostDriver()
	if b.gvisor {
		switch {
		case !d.nvproxy:
			return fmt.Errorf("runsc nvproxy unavailable: %s has no --nvproxy flag", d.version)
		case driver != nil:
			return fmt.Errorf("runsc nvproxy unavailable: %w", driver)
		}
		return errors.New("runsc nvproxy: GPU sandboxes under gVisor are not wired in this build")
	}
	return driver
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
