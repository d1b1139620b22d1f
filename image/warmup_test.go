package image

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWarmupRoundTripAndRefusals(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(RootFS(dir, "py"), 0o755); err != nil {
		t.Fatal(err)
	}
	if argv, err := Warmup(dir, "py"); err != nil || argv != nil {
		t.Fatalf("no warm-up declared: %q %v", argv, err)
	}
	want := []string{"python3", "-c", "import json, re, subprocess"}
	if err := SetWarmup(dir, "py", want); err != nil {
		t.Fatal(err)
	}
	if argv, err := Warmup(dir, "py"); err != nil || strings.Join(argv, "|") != strings.Join(want, "|") {
		t.Fatalf("Warmup = %q %v, want %q", argv, err, want)
	}
	for _, bad := range [][]string{{""}, {"sh", "a\x00b"}, {strings.Repeat("x", maxWarmup)}} {
		if err := SetWarmup(dir, "py", bad); !errors.Is(err, ErrBadWarmup) {
			t.Errorf("SetWarmup(%q) = %v, want ErrBadWarmup", bad, err)
		}
	}
	if argv, _ := Warmup(dir, "py"); len(argv) != 3 {
		t.Fatalf("a refused SetWarmup changed the warm-up to %q", argv)
	}
	if err := SetWarmup(dir, "ruby", want); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetWarmup of a missing template = %v, want ErrNotFound", err)
	}
	if _, err := Warmup(dir, "../py"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Warmup(../py) = %v, want ErrNotFound", err)
	}
	if WarmupDigest(nil) != "" || WarmupDigest(want) == WarmupDigest(want[:2]) {
		t.Error("WarmupDigest does not tell warm-ups apart")
	}
	if err := os.WriteFile(filepath.Join(dir, "py", WarmupFile), []byte(`["sh",`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Warmup(dir, "py"); err == nil || !strings.Contains(err.Error(), "malformed warmup file") {
		t.Errorf("a malformed file: %v", err)
	}
	if err := SetWarmup(dir, "py", nil); err != nil {
		t.Fatal(err)
	}
	if argv, err := Warmup(dir, "py"); err != nil || argv != nil {
		t.Fatalf("after clearing: %q %v", argv, err)
	}
}
