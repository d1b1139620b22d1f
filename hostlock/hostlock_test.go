package hostlock

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestLocksAreExclusiveAcrossProcesses: a lock held by another process is
// refused (nil, nil), shared locks coexist, and a holder's death frees the
// lock.
func TestLocksAreExclusiveAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	holder := exec.Command("flock", "--exclusive", path, "sleep", "30")
	if err := holder.Start(); err != nil {
		t.Fatalf("flock(1) (util-linux): %v", err)
	}
	// Wait until the other process holds it.
	for {
		f, err := Try(path, Shared)
		if err != nil {
			t.Fatal(err)
		}
		if f == nil {
			break
		}
		f.Close()
	}
	if f, err := Try(path, Exclusive); err != nil || f != nil {
		t.Fatalf("Try while another process holds it: %v %v, want nil, nil", f, err)
	}
	_ = holder.Process.Kill()
	_ = holder.Wait()
	a, err := Wait(path, Shared)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Try(path, Shared)
	if err != nil || b == nil {
		t.Fatalf("second shared lock: %v %v", b, err)
	}
	b.Close()
	if f, err := Try(path, Exclusive); err != nil || f != nil {
		t.Fatalf("exclusive over a shared holder: %v %v, want nil, nil", f, err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}
