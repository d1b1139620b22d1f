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
	"github.com/wovyr/wovyr/backend/wasm"
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
func ociFactory(mk func(oci.Config) (*oci.Backend, error)) func(testing.TB) Factory {
	return func(t testing.TB) Factory {
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

// wasmBenchFactory prepares sandboxes of an in-process wasm backend.
func wasmBenchFactory(t testing.TB) Factory {
	b, err := wasm.New(wasm.Config{StateDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return backendFactory(t, b, sandbox.Template{Kind: sandbox.KindWasm})
}

// wasmBenchInvocation runs the smallest WASI module: an empty _start.
func wasmBenchInvocation(t testing.TB) *sandbox.Invocation {
	// (module (memory (export "memory") 1) (func (export "_start")))
	mod := []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
		0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type: () -> ()
		0x03, 0x02, 0x01, 0x00, // func 0: type 0
		0x05, 0x03, 0x01, 0x00, 0x01, // memory: min 1
		0x07, 0x13, 0x02, 0x06, 'm', 'e', 'm', 'o', 'r', 'y', 0x02, 0x00, 0x06, '_', 's', 't', 'a', 'r', 't', 0x00, 0x00,
		0x0a, 0x04, 0x01, 0x02, 0x00, 0x0b, // code: empty body
	}
	return &sandbox.Invocation{Tenant: "bench", Policy: sandbox.Policy{Trust: sandbox.Internal},
		Workload: sandbox.Workload{Kind: sandbox.KindWasm, Module: mod, Argv: []string{"noop"}}}
}
