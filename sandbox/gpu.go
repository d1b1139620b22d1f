package sandbox

import "github.com/wovyr/wovyr/resource"

// Resources is what an invocation asks the scheduler for: the vector (CPU,
// memory, GPU count) and, for GPUs, which devices qualify.
type Resources struct {
	resource.Vector
	// GPUMIGProfile, when set, asks for MIG instances of this profile
	// (e.g. "1g.10gb") instead of whole GPUs. Empty means whole GPUs.
	GPUMIGProfile string `json:"gpu_mig_profile,omitempty"`
	// GPUMinMemoryBytes is the least memory each assigned GPU must have.
	// Zero means any.
	GPUMinMemoryBytes int64 `json:"gpu_min_memory_bytes,omitempty"`
}

// DeviceNode is a character device node a sandbox may be given.
type DeviceNode struct {
	Path  string // e.g. /dev/nvidia0
	Major int64
	Minor int64
}

// GPUDevice is one GPU or MIG instance assigned to an invocation: the
// only device a backend may expose to it, by these nodes and this UUID.
type GPUDevice struct {
	UUID  string
	Nodes []DeviceNode
}
