//go:build !cgo

package battery

import (
	"context"
	"errors"

	"github.com/wovyr/wovyr/sandbox"
)

// nvmlGPUs: a build without cgo has no NVML (gpu_nvml.go).
func nvmlGPUs(context.Context) ([]sandbox.GPUDevice, error) {
	return nil, errors.New("no NVML in a build without cgo")
}
