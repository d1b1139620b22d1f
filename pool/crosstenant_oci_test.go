package pool

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/wovyr/wovyr/backend/microvm"
	"github.com/wovyr/wovyr/backend/oci"
	"github.com/wovyr/wovyr/image"
	"github.com/wovyr/wovyr/internal/vmtest"
	"github.com/wovyr/wovyr/sandbox"
)

// ociState holds the busybox template and the agent for the OCI rows of
// the cross-tenant test; separate from other packages' test state.
const ociState = "/var/cache/wovyr-test/pool"

var (
	agentOnce sync.Once
	agentPath string
	agentErr  error
)

// testAgent builds the static wovyr-guest once per test binary.
func testAgent(t testing.TB) string {
	agentOnce.Do(func() {
		dir, err := os.MkdirTemp("", "wovyr-pool-agent-")
		if err != nil {
			agentErr = err
			return
		}
		os.Chmod(dir, 0o755)
		agentPath = filepath.Join(dir, "wovyr-guest")
		cmd := exec.Command("go", "build", "-o", agentPath, "github.com/wovyr/wovyr/cmd/wovyr-guest")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			agentErr = err
			t.Logf("%s", out)
		}
	})
	if agentErr != nil {
		t.Fatalf("build wovyr-guest: %v", agentErr)
	}
	return agentPath
}

// ociFactory returns the row factory for the container or gvisor backend.
func ociFactory(mk func(oci.Config) (*oci.Backend, error)) func(*testing.T) Factory {
	return func(t *testing.T) Factory {
		imgs := filepath.Join(ociState, "images")
		if !image.Exists(imgs, "busybox") {
			if err := image.Build(context.Background(), "busybox", imgs, nil); err != nil {
				t.Fatal(err)
			}
		}
		b, err := mk(oci.Config{StateDir: ociState, Agent: testAgent(t), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return backendFactory(t, b, sandbox.Template{Kind: sandbox.KindCommand, Image: "busybox"})
	}
}

var vmEnv vmtest.Builder

// microvmFactory returns the row factory for the microVM backend (one-shot
// VMs under TCG here: each Run boots one).
func microvmFactory(t *testing.T) Factory {
	e := vmEnv.Get(t)
	state, err := os.MkdirTemp("", "wovyr-pool-microvm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	b, err := microvm.New(microvm.Config{StateDir: state, ImageDir: e.Image.Dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return backendFactory(t, b, sandbox.Template{Kind: sandbox.KindCommand})
}

// TestMain removes what the backend rows built once per binary.
func TestMain(m *testing.M) {
	code := m.Run()
	vmEnv.Cleanup()
	if agentPath != "" {
		os.RemoveAll(filepath.Dir(agentPath))
	}
	os.Exit(code)
}
