package wasm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// Test guests are built from testdata during the test run: Go with
// GOOS=wasip1, C with clang --target=wasm32-wasi (wasi-libc), WAT with
// wat2wasm (wabt). Nothing prebuilt is committed.

// guestDir holds the built guests; sharedState is the state dir most tests
// share, so each guest is compiled once per test run (the on-disk cache).
var guestDir, sharedState string

// testWorker is Config.Worker for tests: this test binary (see TestMain).
var testWorker []string

func TestMain(m *testing.M) {
	if os.Getenv(execHelperEnv) != "" { // the test binary doubles as wovyr wasm-exec
		os.Exit(ExecMain(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	if os.Getenv(WorkerEnv) != "" { // and as wovyr wasm-worker
		os.Exit(WorkerMain(context.Background(), os.Stdin, os.Stdout))
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testWorker = []string{exe}
	d, err := os.MkdirTemp("", "wovyr-wasm-guests-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	guestDir = d
	sharedState = filepath.Join(d, "state")
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

var (
	guestMu    sync.Mutex
	guestBuilt = map[string][]byte{}
)

// guest returns the module built from testdata: "go" for goguest, "c/NAME"
// for cguest/NAME.c, "wat/NAME" for wat/NAME.wat.
func guest(t testing.TB, name string) []byte {
	t.Helper()
	guestMu.Lock()
	defer guestMu.Unlock()
	if b, ok := guestBuilt[name]; ok {
		return b
	}
	out := filepath.Join(guestDir, filepath.Base(name)+".wasm")
	var cmd *exec.Cmd
	switch dir, base := filepath.Split(name); dir {
	case "":
		cmd = exec.Command("go", "build", "-o", out, "./testdata/goguest")
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	case "c/":
		cmd = exec.Command("clang", "--target=wasm32-wasi", "--sysroot=/usr", "-O2", "-o", out, "testdata/cguest/"+base+".c")
	case "wat/":
		cmd = exec.Command("wat2wasm", "testdata/wat/"+base+".wat", "-o", out)
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building guest %s: %v\n%s", name, err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	guestBuilt[name] = b
	return b
}

// newBackend makes a Backend over the shared state dir, closed at cleanup.
func newBackend(t testing.TB, mod ...func(*Config)) *Backend {
	t.Helper()
	cfg := Config{StateDir: sharedState, Worker: testWorker}
	for _, f := range mod {
		f(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func inv(module []byte, argv ...string) *sandbox.Invocation {
	return &sandbox.Invocation{
		Tenant:   "t1",
		Workload: sandbox.Workload{Kind: sandbox.KindWasm, Module: module, Argv: argv},
		Limits:   sandbox.Limits{Wall: 10 * time.Second},
		Policy:   sandbox.Policy{Trust: sandbox.Internal},
	}
}

// run prepares a sandbox, runs in on it and destroys it.
func run(t testing.TB, b *Backend, in *sandbox.Invocation) *sandbox.Result {
	t.Helper()
	ctx := context.Background()
	sb, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindWasm})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(ctx)
	res, err := sb.Run(ctx, in)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return res
}
