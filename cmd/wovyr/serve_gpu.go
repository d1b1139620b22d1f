package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/gpu"
)

// openGPUs makes the daemon's GPU allocator from the configuration: NVML
// unless told otherwise (no NVML: no GPUs, logged), none, or the fake
// inventory, which only an explicit "fake" selects. The close func
// releases the inventory; it is never nil.
func openGPUs(ctx context.Context, c config.GPU, log *slog.Logger) (*gpu.Allocator, func(), error) {
	var inv gpu.Inventory
	switch c.Inventory {
	case config.GPUNone:
		log.Info("gpu: off by configuration")
		return nil, func() {}, nil
	case config.GPUFake:
		log.Warn("gpu: FAKE inventory from configuration: made-up devices, for tests and demos only", "count", c.Fake.Count, "mig", c.Fake.MIG)
		inv = gpu.NewFake(c.Fake.Count, c.Fake.MemoryBytes, c.Fake.MIG...)
	default:
		n, err := gpu.OpenNVML("")
		if errors.Is(err, gpu.ErrNoNVML) {
			log.Info("gpu: no GPUs on this node", "reason", err.Error())
			return nil, func() {}, nil
		}
		if err != nil {
			return nil, nil, err
		}
		inv = n
	}
	a, err := gpu.NewAllocator(ctx, inv, log)
	if err != nil {
		inv.Close()
		return nil, nil, err
	}
	if a.Count() == 0 {
		inv.Close()
		log.Info("gpu: the inventory lists no devices")
		return nil, func() {}, nil
	}
	log.Info("gpu: devices", "count", a.Count(), "free", a.Free())
	return a, func() { inv.Close() }, nil
}
