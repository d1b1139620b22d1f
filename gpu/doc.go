// Package gpu is wovyr's GPU inventory and device assignment: which GPUs
// and MIG instances this node has (Inventory: NVML, or a Fake for tests),
// which tenant's task holds which of them (Allocator), and the scrub that
// must pass before a device goes to anyone else.
//
// # Model
//
// A Device is one assignable unit: a whole GPU or one MIG instance, with
// its UUID, memory, MIG profile, health and the device nodes a process
// needs to use it. The Allocator places a task's Request on concrete free
// devices, all or nothing, lowest inventory index first (deterministic),
// and is the scheduler's sched.Placer. A device belongs to at most one
// task, hence one tenant, at a time: no time-slicing, no MPS, no sharing
// of a MIG instance.
//
// # Scrub, then free
//
// Release does not free a device: it scrubs it first. The device must
// show no process (NVML's compute and graphics process lists); where it
// still shows some or its list cannot be read, it is reset where the
// device allows (PCI function reset of a whole GPU) and checked again. A
// device that cannot be verified clean is quarantined — logged, counted,
// never assigned again until an operator clears it (Unquarantine). An
// unhealthy device, or one already showing processes when the allocator
// starts (after a daemon crash), starts quarantined.
//
// # NVML
//
// OpenNVML dlopens libnvidia-ml.so.1 at run time (github.com/NVIDIA/go-nvml),
// so every build has the real path and a node without the driver answers
// ErrNoNVML, which callers treat as "no GPUs". It never parses nvidia-smi.
//
// # What it does not do
//
// It does not decide fairness (package sched charges dominant shares) nor
// which backend may receive a device (package manager's floors). It does
// not create or destroy MIG instances: it uses those the operator made.
package gpu
