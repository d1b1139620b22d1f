// Package vmtest builds, once per test binary, the wovyr-guest agent and a
// microVM image from this checkout, for the tests of vmimage, vmm and
// backend/microvm. It skips (saying why) only when the kernel package or
// QEMU is truly absent; a build failure fails the test.
package vmtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/wovyr/wovyr/vmimage"
)

// Env is what the tests share.
type Env struct {
	Guest string
	Image *vmimage.Image
}

// once holds the built image; a test binary builds it at most once.
type once struct {
	sync.Once
	env *Env
	err error
	dir string
}

// Builder builds the environment lazily; declare one per test package.
type Builder struct{ o once }

// Get returns the shared environment, building it on first use.
func (b *Builder) Get(t testing.TB) *Env {
	t.Helper()
	if _, _, err := vmimage.FindKernel("/boot", "/lib/modules"); err != nil {
		t.Skipf("no guest kernel on this node: %v", err)
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("qemu-system-x86_64 is not installed (apt qemu-system-x86)")
	}
	b.o.Do(func() {
		b.o.dir, b.o.err = os.MkdirTemp("", "wovyr-vmtest-")
		if b.o.err != nil {
			return
		}
		_ = os.Chmod(b.o.dir, 0o755)
		guest := filepath.Join(b.o.dir, "wovyr-guest")
		b.o.err = BuildGuest(context.Background(), guest)
		if b.o.err != nil {
			return
		}
		var im *vmimage.Image
		im, b.o.err = vmimage.Build(context.Background(), vmimage.Options{Dir: filepath.Join(b.o.dir, "image"), Guest: guest})
		b.o.env = &Env{Guest: guest, Image: im}
	})
	if b.o.err != nil {
		t.Fatalf("build the microVM test image: %v", b.o.err)
	}
	return b.o.env
}

// Cleanup removes what Get built; call it from TestMain after m.Run.
func (b *Builder) Cleanup() {
	if b.o.dir != "" {
		os.RemoveAll(b.o.dir)
	}
}

// BuildGuest builds cmd/wovyr-guest statically to dst.
func BuildGuest(ctx context.Context, dst string) error {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", dst, "./cmd/wovyr-guest")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		return &buildError{err: err, out: string(out)}
	}
	return nil
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return "go build wovyr-guest: " + e.err.Error() + ": " + e.out }
