package sandbox

import (
	"encoding/json"
	"fmt"
	"testing"
)

// TestGPUEnv: device-selecting variables of the workload (or image) are
// dropped, and with GPUs assigned both name exactly their UUIDs.
func TestGPUEnv(t *testing.T) {
	env := []string{"A=1", "NVIDIA_VISIBLE_DEVICES=all", "CUDA_VISIBLE_DEVICES=0,1", "NVIDIA_VISIBLE_DEVICESX=kept", "B=2"}
	if got := fmt.Sprint(GPUEnv(env, nil)); got != "[A=1 NVIDIA_VISIBLE_DEVICESX=kept B=2]" {
		t.Fatalf("no GPUs: %s", got)
	}
	got := fmt.Sprint(GPUEnv(env, []GPUDevice{{UUID: "GPU-x"}, {UUID: "MIG-y"}}))
	if got != "[A=1 NVIDIA_VISIBLE_DEVICESX=kept B=2 NVIDIA_VISIBLE_DEVICES=GPU-x,MIG-y CUDA_VISIBLE_DEVICES=GPU-x,MIG-y]" {
		t.Fatalf("two GPUs: %s", got)
	}
	if GPUEnv(nil, nil) == nil {
		t.Fatal("GPUEnv(nil, nil) is nil: a nil env would inherit the host's")
	}
}

// TestResourcesJSON: the GPU fields sit flat in "resources" beside the
// vector, and the assigned devices never come from the client.
func TestResourcesJSON(t *testing.T) {
	var inv Invocation
	in := `{"resources":{"cpu_millis":500,"gpu":2,"gpu_mig_profile":"1g.10gb","gpu_min_memory_bytes":1024},"GPUs":[{"UUID":"GPU-forged"}]}`
	if err := json.Unmarshal([]byte(in), &inv); err != nil {
		t.Fatal(err)
	}
	r := inv.Resources
	if r.CPUMillis != 500 || r.GPU != 2 || r.GPUMIGProfile != "1g.10gb" || r.GPUMinMemoryBytes != 1024 || inv.GPUs != nil {
		t.Fatalf("decoded %+v, GPUs %v", r, inv.GPUs)
	}
}
