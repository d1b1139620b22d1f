package sandbox

import (
	"slices"
	"strings"

	"github.com/wovyr/wovyr/resource"
)

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
	// PCI is a whole GPU's PCI address ("0000:01:00.0"), what a microVM
	// passes through with VFIO; "" for a MIG instance.
	PCI string
}

// gpuSelectors are the variables CUDA and the NVIDIA container tooling read
// to choose devices. They never come from the workload or the image.
var gpuSelectors = []string{"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"}

// GPUEnv returns env without any device-selecting variable and, when gpus
// is not empty, with NVIDIA_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES set to
// exactly the assigned UUIDs (in assignment order). An invocation cannot
// widen its devices by naming others (or "all").
func GPUEnv(env []string, gpus []GPUDevice) []string {
	out := make([]string, 0, len(env)+len(gpuSelectors))
	for _, kv := range env {
		if !isGPUSelector(kv) {
			out = append(out, kv)
		}
	}
	if len(gpus) == 0 {
		return out
	}
	uuids := make([]string, len(gpus))
	for i, g := range gpus {
		uuids[i] = g.UUID
	}
	for _, k := range gpuSelectors {
		out = append(out, k+"="+strings.Join(uuids, ","))
	}
	return out
}

func isGPUSelector(kv string) bool {
	k, _, _ := strings.Cut(kv, "=")
	return slices.Contains(gpuSelectors, k)
}
