//go:build cgo

package battery

import (
	"context"
	"fmt"

	"github.com/wovyr/wovyr/gpu"
	"github.com/wovyr/wovyr/sandbox"
)

// nvmlGPUs are this node's whole GPUs through NVML (MIG instances only
// where there are none). NVML needs cgo; the static builds that link
// package battery without it (the guest, the egress probe) run no GPU rows.
func nvmlGPUs(ctx context.Context) ([]sandbox.GPUDevice, error) {
	inv, err := gpu.OpenNVML("")
	if err != nil {
		return nil, err
	}
	defer inv.Close()
	devs, err := inv.Devices(ctx)
	if err != nil {
		return nil, err
	}
	var whole, mig []sandbox.GPUDevice
	for _, d := range devs {
		g := sandbox.GPUDevice{UUID: d.UUID, Nodes: d.Nodes, PCI: d.PCI}
		if d.MIGProfile == "" {
			whole = append(whole, g)
		} else {
			mig = append(mig, g)
		}
	}
	if out := append(whole, mig...); len(out) > 0 {
		return out, nil
	}
	return nil, fmt.Errorf("NVML lists no devices")
}
