package gpu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/sandbox"
)

// NVML is the Inventory of a node with NVIDIA's driver, read through NVML.
type NVML struct {
	mu  sync.Mutex
	lib nvml.Interface
	dev string // where the device nodes live ("/dev")
	sys string // sysfs root, for the PCI reset ("/sys")
}

// OpenNVML loads libnvidia-ml.so.1 (path "" means the default search) and
// initialises NVML. Where the library is absent or does not initialise it
// answers an error matching ErrNoNVML: the node has no usable GPUs.
func OpenNVML(path string) (*NVML, error) {
	var opts []nvml.LibraryOption
	if path != "" {
		opts = append(opts, nvml.WithLibraryPath(path))
	}
	lib := nvml.New(opts...)
	if r := lib.Init(); r != nvml.SUCCESS {
		name := path
		if name == "" {
			name = "libnvidia-ml.so.1"
		}
		return nil, fmt.Errorf("%w: %s: %s", ErrNoNVML, name, nvmlError(r))
	}
	return &NVML{lib: lib, dev: "/dev", sys: "/sys"}, nil
}

// nvmlError names r without calling into a library that may not be loaded.
func nvmlError(r nvml.Return) string {
	if r == nvml.ERROR_LIBRARY_NOT_FOUND {
		return "library not found"
	}
	return r.Error()
}

func nvmlErr(what string, r nvml.Return) error {
	return fmt.Errorf("nvml %s: %s", what, nvmlError(r))
}

// Devices implements Inventory: whole GPUs not in MIG mode, and the MIG
// instances of those in MIG mode, by NVML index.
func (n *NVML) Devices(context.Context) ([]Device, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	count, r := n.lib.DeviceGetCount()
	if r != nvml.SUCCESS {
		return nil, nvmlErr("device count", r)
	}
	ctl := n.controlNodes()
	var out []Device
	for i := range count {
		h, r := n.lib.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			return nil, nvmlErr(fmt.Sprintf("device %d", i), r)
		}
		gpu, err := n.describe(h, i, "")
		if err != nil {
			return nil, err
		}
		minor, r := n.lib.DeviceGetMinorNumber(h)
		if r != nvml.SUCCESS {
			return nil, nvmlErr("minor number", r)
		}
		own := n.node(fmt.Sprintf("nvidia%d", minor))
		if cur, _, r := n.lib.DeviceGetMigMode(h); r != nvml.SUCCESS || cur != nvml.DEVICE_MIG_ENABLE {
			gpu.Nodes = append([]sandbox.DeviceNode{own}, ctl...)
			if pci, r := n.lib.DeviceGetPciInfo(h); r == nvml.SUCCESS {
				gpu.PCI = sysfsAddress(pci.BusId)
			}
			out = append(out, gpu)
			continue
		}
		migs, err := n.migs(h, i, minor, own, ctl)
		if err != nil {
			return nil, err
		}
		out = append(out, migs...)
	}
	return out, nil
}

// migs lists the MIG instances of GPU h (index i, minor).
func (n *NVML) migs(h nvml.Device, i, minor int, own sandbox.DeviceNode, ctl []sandbox.DeviceNode) ([]Device, error) {
	max, r := n.lib.DeviceGetMaxMigDeviceCount(h)
	if r != nvml.SUCCESS {
		return nil, nvmlErr("MIG device count", r)
	}
	var out []Device
	for j := range max {
		m, r := n.lib.DeviceGetMigDeviceHandleByIndex(h, j)
		if r == nvml.ERROR_NOT_FOUND {
			continue
		}
		if r != nvml.SUCCESS {
			return nil, nvmlErr("MIG device", r)
		}
		name, r := n.lib.DeviceGetName(m)
		if r != nvml.SUCCESS {
			return nil, nvmlErr("MIG name", r)
		}
		profile := name
		if k := strings.LastIndex(name, "MIG "); k >= 0 {
			profile = name[k+len("MIG "):]
		}
		d, err := n.describe(m, i, profile)
		if err != nil {
			return nil, err
		}
		gi, r1 := n.lib.DeviceGetGpuInstanceId(m)
		ci, r2 := n.lib.DeviceGetComputeInstanceId(m)
		d.Nodes = append([]sandbox.DeviceNode{own}, ctl...)
		if r1 == nvml.SUCCESS && r2 == nvml.SUCCESS {
			d.Nodes = append(d.Nodes, n.migCaps(minor, gi, ci)...)
		} else {
			d.Health = "MIG instance ids unreadable"
		}
		out = append(out, d)
	}
	return out, nil
}

// describe reads a device's UUID, memory and health.
func (n *NVML) describe(h nvml.Device, i int, profile string) (Device, error) {
	uuid, r := n.lib.DeviceGetUUID(h)
	if r != nvml.SUCCESS {
		return Device{}, nvmlErr("UUID", r)
	}
	d := Device{UUID: uuid, Index: i, MIGProfile: profile}
	if mem, r := n.lib.DeviceGetMemoryInfo(h); r == nvml.SUCCESS {
		d.MemoryBytes = int64(mem.Total)
	} else {
		d.Health = "memory info: " + nvmlError(r)
	}
	if profile == "" {
		if st, r := n.lib.DeviceGetRetiredPagesPendingStatus(h); r == nvml.SUCCESS && st == nvml.FEATURE_ENABLED {
			d.Health = "retired pages pending: needs a reset"
		}
	}
	return d, nil
}

// controlNodes are nvidiactl and nvidia-uvm, as present.
func (n *NVML) controlNodes() []sandbox.DeviceNode {
	var out []sandbox.DeviceNode
	for _, name := range []string{"nvidiactl", "nvidia-uvm"} {
		if nd := n.node(name); nd.Major != 0 || nd.Minor != 0 {
			out = append(out, nd)
		}
	}
	return out
}

// node stats a device node under n.dev.
func (n *NVML) node(name string) sandbox.DeviceNode {
	p := filepath.Join(n.dev, name)
	nd := sandbox.DeviceNode{Path: p}
	var st unix.Stat_t
	if unix.Stat(p, &st) == nil {
		nd.Major, nd.Minor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
	}
	return nd
}

// migCaps are the /dev/nvidia-caps nodes granting access to GPU instance
// gi and compute instance ci of GPU minor, from the driver's
// /proc/driver/nvidia-caps/mig-minors table.
func (n *NVML) migCaps(minor, gi, ci int) []sandbox.DeviceNode {
	b, err := os.ReadFile("/proc/driver/nvidia-caps/mig-minors")
	if err != nil {
		return nil
	}
	want := map[string]bool{
		fmt.Sprintf("gpu%d/gi%d/access", minor, gi):          true,
		fmt.Sprintf("gpu%d/gi%d/ci%d/access", minor, gi, ci): true,
	}
	var out []sandbox.DeviceNode
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && want[f[0]] {
			out = append(out, n.node("nvidia-caps/nvidia-cap"+f[1]))
		}
	}
	return out
}

// handle finds a device (GPU or MIG instance) by UUID.
func (n *NVML) handle(uuid string) (nvml.Device, error) {
	h, r := n.lib.DeviceGetHandleByUUID(uuid)
	if r != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: %s: %s", ErrUnknownDevice, uuid, nvmlError(r))
	}
	return h, nil
}

// Processes implements Inventory: the compute and graphics processes.
func (n *NVML) Processes(_ context.Context, uuid string) ([]int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, err := n.handle(uuid)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, list := range []func(nvml.Device) ([]nvml.ProcessInfo, nvml.Return){n.lib.DeviceGetComputeRunningProcesses, n.lib.DeviceGetGraphicsRunningProcesses} {
		ps, r := list(h)
		if r != nvml.SUCCESS {
			return nil, nvmlErr("process list", r)
		}
		for _, p := range ps {
			pids = append(pids, int(p.Pid))
		}
	}
	return pids, nil
}

// Reset implements Inventory: a PCI function reset of a whole GPU through
// sysfs; MIG instances cannot be reset alone.
func (n *NVML) Reset(_ context.Context, uuid string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, err := n.handle(uuid)
	if err != nil {
		return err
	}
	if mig, r := n.lib.DeviceIsMigDeviceHandle(h); r == nvml.SUCCESS && mig {
		return fmt.Errorf("%w: %s is a MIG instance", ErrResetUnsupported, uuid)
	}
	pci, r := n.lib.DeviceGetPciInfo(h)
	if r != nvml.SUCCESS {
		return nvmlErr("PCI info", r)
	}
	p := filepath.Join(n.sys, "bus/pci/devices", sysfsAddress(pci.BusId), "reset")
	if err := os.WriteFile(p, []byte("1"), 0); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %s has no PCI reset", ErrResetUnsupported, uuid)
		}
		return fmt.Errorf("reset %s: %w", uuid, err)
	}
	return nil
}

// sysfsAddress is NVML's PCI bus id ("00000000:01:00.0", an 8-digit
// domain) in sysfs form ("0000:01:00.0").
func sysfsAddress(b [32]int8) string {
	bdf := strings.ToLower(busID(b))
	if len(bdf) == 16 {
		bdf = bdf[4:]
	}
	return bdf
}

func busID(b [32]int8) string {
	var s strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		s.WriteByte(byte(c))
	}
	return s.String()
}

// Close implements Inventory.
func (n *NVML) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if r := n.lib.Shutdown(); r != nvml.SUCCESS {
		return nvmlErr("shutdown", r)
	}
	return nil
}
