package config

import "github.com/wovyr/wovyr/sandbox"

// GPU inventories.
const (
	// GPUNVML reads the devices through NVML (the zero value). A node
	// without the NVIDIA driver has no GPUs; that is logged, not an error.
	GPUNVML = "nvml"
	// GPUNone turns GPUs off: GPU invocations are refused.
	GPUNone = "none"
	// GPUFake serves made-up devices (GPU.Fake): for tests and demos only,
	// never chosen unless named here, and logged loudly at start.
	GPUFake = "fake"
)

// GPU configures the node's GPUs.
type GPU struct {
	// Inventory is where the devices come from: "nvml" (the zero value),
	// "none" or "fake".
	Inventory string `json:"inventory,omitempty"`
	// Fake describes the fake inventory's devices; only with "fake".
	Fake FakeGPUs `json:"fake,omitzero"`
}

// FakeGPUs is a fake inventory: Count whole GPUs of MemoryBytes each, and
// one more GPU split into MIG instances of the MIG profiles.
type FakeGPUs struct {
	Count       int      `json:"count,omitempty"`
	MemoryBytes int64    `json:"memory_bytes,omitempty"`
	MIG         []string `json:"mig,omitempty"`
}

func (g GPU) validate() error {
	switch g.Inventory {
	case "", GPUNVML, GPUNone:
		if g.Fake.Count != 0 || g.Fake.MemoryBytes != 0 || len(g.Fake.MIG) != 0 {
			return sandbox.Errorf(sandbox.BadInput, "gpu.fake", "fake devices need gpu.inventory %q", GPUFake)
		}
	case GPUFake:
		if g.Fake.Count < 0 || g.Fake.Count > 64 || g.Fake.MemoryBytes < 0 || len(g.Fake.MIG) > 7 || g.Fake.Count+len(g.Fake.MIG) == 0 {
			return sandbox.Errorf(sandbox.BadInput, "gpu.fake", "want 0..64 GPUs, up to 7 MIG instances, at least one device, memory not negative")
		}
	default:
		return sandbox.Errorf(sandbox.BadInput, "gpu.inventory", "want %s, %s or %s, not %q", GPUNVML, GPUNone, GPUFake, g.Inventory)
	}
	return nil
}
