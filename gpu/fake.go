package gpu

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/wovyr/wovyr/sandbox"
)

// Fake is an Inventory of made-up devices for tests and CI (no GPU on the
// development machines). It can simulate a dirty device (processes left
// behind), an unreadable process list, and devices that cannot be reset.
// It is never chosen by the daemon on its own: only explicit configuration
// or a test selects it.
type Fake struct {
	mu        sync.Mutex
	devices   []Device
	procs     map[string][]int
	listErr   map[string]error
	resetting map[string]FakeReset
	resets    []string
	closed    bool
}

// FakeReset is what a Reset of a fake device does.
type FakeReset int

const (
	// ResetCleans: the reset succeeds and clears the device's processes
	// (the zero value).
	ResetCleans FakeReset = iota
	// ResetUnsupported: Reset answers ErrResetUnsupported.
	ResetUnsupported
	// ResetLeavesDirty: Reset succeeds but the processes stay.
	ResetLeavesDirty
)

// FakeMajor is the major number of the fake device nodes (NVIDIA's is 195).
const FakeMajor = 195

// NewFake returns a fake inventory of n whole GPUs of memory bytes each,
// UUIDs GPU-fake-0 …, nodes /dev/nvidia0 … (minor = index) and PCI
// addresses 0000:01:00.0 … (FakePCI), plus the
// MIG instances given as profiles on one extra GPU in MIG mode (index n).
func NewFake(n int, memory int64, mig ...string) *Fake {
	f := &Fake{procs: map[string][]int{}, listErr: map[string]error{}, resetting: map[string]FakeReset{}}
	for i := range n {
		f.devices = append(f.devices, Device{UUID: fmt.Sprintf("GPU-fake-%d", i), Index: i, MemoryBytes: memory, Nodes: fakeNodes(i), PCI: FakePCI(i)})
	}
	for j, p := range mig {
		nodes := append(fakeNodes(n), sandbox.DeviceNode{Path: fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", 10+j), Major: FakeMajor + 1, Minor: int64(10 + j)})
		f.devices = append(f.devices, Device{UUID: fmt.Sprintf("MIG-fake-%d-%d", n, j), Index: n, MIGProfile: p, MemoryBytes: memory / int64(len(mig)), Nodes: nodes})
	}
	return f
}

// FakePCI is fake GPU i's made-up PCI address, bus i+1.
func FakePCI(i int) string { return fmt.Sprintf("0000:%02x:00.0", i+1) }

// fakeNodes are a whole GPU's nodes: /dev/nvidiaN plus the control nodes.
func fakeNodes(minor int) []sandbox.DeviceNode {
	return []sandbox.DeviceNode{
		{Path: fmt.Sprintf("/dev/nvidia%d", minor), Major: FakeMajor, Minor: int64(minor)},
		{Path: "/dev/nvidiactl", Major: FakeMajor, Minor: 255},
		{Path: "/dev/nvidia-uvm", Major: FakeMajor + 2, Minor: 0},
	}
}

// SetHealth marks a device unhealthy (reason) or healthy ("").
func (f *Fake) SetHealth(uuid, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.devices {
		if f.devices[i].UUID == uuid {
			f.devices[i].Health = reason
		}
	}
}

// SetProcesses makes the device show these pids (a task left them behind).
func (f *Fake) SetProcesses(uuid string, pids ...int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.procs[uuid] = pids
}

// SetListError makes the device's process list unreadable (nil clears it).
func (f *Fake) SetListError(uuid string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listErr[uuid] = err
}

// SetReset sets what Reset does for the device.
func (f *Fake) SetReset(uuid string, r FakeReset) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resetting[uuid] = r
}

// Resets returns the UUIDs reset so far, in order.
func (f *Fake) Resets() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.resets)
}

func (f *Fake) find(uuid string) bool {
	return slices.ContainsFunc(f.devices, func(d Device) bool { return d.UUID == uuid })
}

// Devices implements Inventory.
func (f *Fake) Devices(context.Context) ([]Device, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := slices.Clone(f.devices)
	for i := range out {
		out[i].Nodes = slices.Clone(out[i].Nodes)
	}
	return out, nil
}

// Processes implements Inventory.
func (f *Fake) Processes(_ context.Context, uuid string) ([]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.find(uuid) {
		return nil, fmt.Errorf("%w: %s", ErrUnknownDevice, uuid)
	}
	if err := f.listErr[uuid]; err != nil {
		return nil, err
	}
	return slices.Clone(f.procs[uuid]), nil
}

// Reset implements Inventory.
func (f *Fake) Reset(_ context.Context, uuid string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.find(uuid) {
		return fmt.Errorf("%w: %s", ErrUnknownDevice, uuid)
	}
	switch f.resetting[uuid] {
	case ResetUnsupported:
		return fmt.Errorf("%w: %s", ErrResetUnsupported, uuid)
	case ResetCleans:
		delete(f.procs, uuid)
		delete(f.listErr, uuid)
	}
	f.resets = append(f.resets, uuid)
	return nil
}

// Close implements Inventory.
func (f *Fake) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}
