package egresstest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// BuildProbe builds the probe (./egress/egresstest/egressprobe) statically
// to dst, for sandboxes with their own kernel and root filesystem (microVM
// guests), which receive it as a workload file.
func BuildProbe(ctx context.Context, dst string) error {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", dst, "./egress/egresstest/egressprobe")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("egresstest: build the probe: %w: %s", err, out)
	}
	return nil
}
