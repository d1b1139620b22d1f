package wasm

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func fmtSscanf(s, f string, a ...any) (int, error) { return fmt.Sscanf(s, f, a...) }

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func tail(b []byte) string {
	if len(b) > 300 {
		b = b[len(b)-300:]
	}
	return string(b)
}

func mustWat(t testing.TB, src string) []byte {
	t.Helper()
	b, err := wat2wasm(src)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// plantCanary writes a secret beside the workspaces, one ".." above /workspace.
func plantCanary(t testing.TB, b *Backend) string {
	t.Helper()
	p := filepath.Join(b.work, "canary")
	if err := os.WriteFile(p, []byte("SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(p) })
	return p
}
