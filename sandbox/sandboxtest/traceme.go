package sandboxtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Traceme builds agent/testdata/traceme — a static Go tool whose leader
// calls PTRACE_TRACEME, sends itself SIGUSR1, prints and exits 7 (issue #25
// item 1) — and returns the binary, for a backend's tests to give a
// workload as a file.
func Traceme(t testing.TB) []byte {
	t.Helper()
	_, here, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(here), "..", "..", "agent", "testdata", "traceme")
	bin := filepath.Join(t.TempDir(), "traceme")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build traceme: %v\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
