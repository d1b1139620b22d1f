package microvm

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/wovyr/wovyr/vmimage"
)

// BuildImage is `wovyr image build microvm`: the guest kernel, initramfs and
// root disk into ImageDir(stateDir) unless o.Dir says otherwise. A zero
// o.Guest means the wovyr-guest binary next to the running executable, else
// on PATH.
func BuildImage(ctx context.Context, stateDir string, o vmimage.Options) (*vmimage.Image, error) {
	if o.Dir == "" {
		o.Dir = ImageDir(stateDir)
	}
	if o.Guest == "" {
		g, err := findGuest()
		if err != nil {
			return nil, err
		}
		o.Guest = g
	}
	return vmimage.Build(ctx, o)
}

func findGuest() (string, error) {
	if exe, err := os.Executable(); err == nil {
		g := filepath.Join(filepath.Dir(exe), "wovyr-guest")
		if _, err := os.Stat(g); err == nil {
			return g, nil
		}
	}
	if g, err := exec.LookPath("wovyr-guest"); err == nil {
		return g, nil
	}
	return "", errors.New("microvm: wovyr-guest not found next to wovyr or on PATH (build it with CGO_ENABLED=0 go build ./cmd/wovyr-guest)")
}
