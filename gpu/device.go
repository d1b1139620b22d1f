package gpu

import (
	"context"
	"errors"
	"fmt"

	"github.com/wovyr/wovyr/sandbox"
)

// Sentinels, matched with errors.Is.
var (
	// ErrNoNVML: libnvidia-ml could not be loaded or initialised; the node
	// has no usable NVIDIA driver. Callers treat it as "no GPUs".
	ErrNoNVML = errors.New("no NVML")
	// ErrBadRequest: a GPU request is malformed (also sandbox.BadInput).
	ErrBadRequest = errors.New("invalid GPU request")
	// ErrUnknownDevice: no device has this UUID.
	ErrUnknownDevice = errors.New("unknown GPU device")
	// ErrResetUnsupported: the device cannot be reset (a MIG instance, or
	// no PCI reset for it).
	ErrResetUnsupported = errors.New("GPU reset not supported")
	// ErrUnknownTask: the task holds no devices.
	ErrUnknownTask = errors.New("task holds no GPU devices")
	// ErrQuarantined: a device could not be verified clean and was taken
	// out of service.
	ErrQuarantined = errors.New("GPU device quarantined")
)

// MaxCount bounds a request's device count.
const MaxCount = 64

// Device is one assignable unit: a whole GPU or one MIG instance.
type Device struct {
	UUID        string // "GPU-…" for a whole GPU, "MIG-…" for an instance
	Index       int    // NVML index of the (parent) GPU
	MIGProfile  string // "" for a whole GPU, else e.g. "1g.10gb"
	MemoryBytes int64
	// Health is "" when healthy, else why not (an unhealthy device starts
	// quarantined).
	Health string
	// Nodes are the device nodes a process needs for this device, control
	// nodes (nvidiactl, nvidia-uvm) included.
	Nodes []sandbox.DeviceNode
	// PCI is a whole GPU's PCI address in sysfs form ("0000:01:00.0"),
	// what VFIO passes through; "" for a MIG instance, which has no PCI
	// function of its own.
	PCI string
}

// Request is what a task asks for.
type Request struct {
	// Count is the number of devices, 0..MaxCount. Zero means no GPU.
	Count int64
	// MIGProfile, when set, asks for MIG instances of this profile; empty
	// asks for whole GPUs (never MIG instances).
	MIGProfile string
	// MinMemoryBytes is the least memory each device must have. Zero means
	// any.
	MinMemoryBytes int64
}

// RequestFor is the GPU request of an invocation's resources.
func RequestFor(r sandbox.Resources) Request {
	return Request{Count: r.GPU, MIGProfile: r.GPUMIGProfile, MinMemoryBytes: r.GPUMinMemoryBytes}
}

// Validate checks r; a bad request is ErrBadRequest and sandbox.BadInput.
func (r Request) Validate() error {
	switch {
	case r.Count < 0 || r.Count > MaxCount:
		return bad("resources.gpu", "GPU count %d must be in 0..%d", r.Count, MaxCount)
	case r.MinMemoryBytes < 0:
		return bad("resources.gpu_min_memory_bytes", "must not be negative")
	case r.Count == 0 && (r.MIGProfile != "" || r.MinMemoryBytes != 0):
		return bad("resources.gpu", "a MIG profile or minimum memory needs a GPU count")
	case len(r.MIGProfile) > 32 || !validProfile(r.MIGProfile):
		return bad("resources.gpu_mig_profile", "invalid MIG profile %q (like 1g.10gb)", r.MIGProfile)
	}
	return nil
}

// validProfile accepts "" and names like "1g.10gb", "3g.40gb", "1g.10gb+me".
func validProfile(p string) bool {
	for _, c := range p {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c == '.' || c == '+') {
			return false
		}
	}
	return true
}

// Matches says d can serve one unit of r.
func (r Request) Matches(d Device) bool {
	if r.MIGProfile != d.MIGProfile {
		return false
	}
	return d.MemoryBytes >= r.MinMemoryBytes
}

func bad(field, format string, args ...any) error {
	return &sandbox.Error{Class: sandbox.BadInput, Field: field, Msg: fmt.Sprintf(format, args...), Err: ErrBadRequest}
}

// Inventory is where the devices come from: NVML on a GPU node, a Fake in
// tests. Implementations are safe for concurrent use.
type Inventory interface {
	// Devices lists the assignable devices: every whole GPU not in MIG
	// mode and every MIG instance of those in MIG mode, in a stable order.
	Devices(ctx context.Context) ([]Device, error)
	// Processes lists the pids using the device.
	Processes(ctx context.Context, uuid string) ([]int, error)
	// Reset resets the device, or answers ErrResetUnsupported.
	Reset(ctx context.Context, uuid string) error
	// Close releases the inventory (NVML shutdown).
	Close() error
}
