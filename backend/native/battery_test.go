package native

import (
	"bytes"
	"context"
	"github.com/wovyr/wovyr/battery"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// buildGuest builds the static wovyr-guest into a directory any uid can
// read, as a release does.
func buildGuest(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "wovyr-guest-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	out := filepath.Join(dir, "wovyr-guest")
	cmd := exec.Command("go", "build", "-o", out, "github.com/wovyr/wovyr/cmd/wovyr-guest")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build wovyr-guest: %v\n%s", err, b)
	}
	return out
}

// TestBatteryCertifiesNative runs the real battery: every applicable probe
// must hold on native and every positive control must flag its weakness.
func TestBatteryCertifiesNative(t *testing.T) {
	if testing.Short() {
		t.Skip("the battery takes tens of seconds")
	}
	b := newBackend(t)
	var progress bytes.Buffer
	rec, err := batteryRun(context.Background(), Suite(b, buildGuest(t)), &progress)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("battery:\n%s", progress.String())
	if !rec.Passed {
		for _, o := range rec.Outcomes {
			if o.Applies && (!o.Pass || !o.ControlFlagged) {
				t.Errorf("#%d %s: pass=%v observed %q; control flagged=%v observed %q", o.ID, o.Name, o.Pass, o.Observed, o.ControlFlagged, o.ControlObserved)
			}
		}
		t.Fatal("native failed certification")
	}
	applied := 0
	for _, o := range rec.Outcomes {
		if o.Applies {
			applied++
		} else if o.Why == "" {
			t.Errorf("#%d marked not applicable without a reason", o.ID)
		}
	}
	if applied != 17 { // 16 and row 94 (self-trace)
		t.Fatalf("%d probes applied, want 17", applied)
	}
}

var batteryRun = battery.Run
