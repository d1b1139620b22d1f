package oci

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/wovyr/wovyr/image"
)

// testState is a fixed state directory so templates (busybox, and base when
// a test needs it) are built once per machine, not per run.
const testState = "/var/cache/wovyr-test/oci"

var (
	testAgent  string // the wovyr-guest built for this run
	testRunner string // the static wasm runner (cmd/wovyr), as make build installs it
)

func TestMain(m *testing.M) {
	if os.Getuid() != 0 {
		fmt.Fprintln(os.Stderr, "backend/oci tests need root (CI runs as root)")
		os.Exit(1)
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "wovyr-oci-agent-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	// A test binary carried to a machine without Go (scripts/gpu-check)
	// is given both prebuilt.
	testAgent, testRunner = os.Getenv("WOVYR_OCI_TEST_AGENT"), os.Getenv("WOVYR_OCI_TEST_RUNNER")
	if testAgent == "" {
		testAgent = filepath.Join(tmp, "wovyr-guest")
		build := exec.Command("go", "build", "-o", testAgent, "github.com/wovyr/wovyr/cmd/wovyr-guest")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build agent: %v\n%s", err, out)
			return 1
		}
	}
	// Every test runs the production configuration, which mounts the
	// wasm runner into each sandbox (the battery's mount rows see it).
	if testRunner == "" {
		testRunner = filepath.Join(tmp, "wovyr-wasm")
		build := exec.Command("go", "build", "-tags", "osusergo,netgo", "-ldflags", "-linkmode external -extldflags -static",
			"-o", testRunner, "github.com/wovyr/wovyr/cmd/wovyr")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build the static wasm runner: %v\n%s", err, out)
			return 1
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	imgs := filepath.Join(testState, "images")
	if !image.Exists(imgs, "busybox") {
		if err := image.Build(ctx, "busybox", imgs, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "build busybox template:", err)
			return 1
		}
	}
	return m.Run()
}

func testConfig(t testing.TB) Config {
	t.Helper()
	// Warnings (a sandbox that died or did not answer, with its runtime's
	// stderr) go to stderr, which go test shows when a test fails.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return Config{StateDir: testState, Agent: testAgent, WasmRunner: testRunner, Logger: log}
}
