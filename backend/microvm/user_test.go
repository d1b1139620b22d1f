package microvm

import (
	"os"
	"testing"
)

// TestUIDClaimsAreHostWide: two state directories (two daemons, or a test
// run beside a daemon) never hold the same VM uid at once; the uid is free
// again once released.
func TestUIDClaimsAreHostWide(t *testing.T) {
	base := uint32(4_000_000_000) - uint32(os.Getpid()) // no real VM's
	a, b := t.TempDir(), t.TempDir()
	uid, release, err := claimUID(a, base, 1)
	if err != nil {
		t.Fatal(err)
	}
	if uid != base {
		t.Fatalf("claimed %d, want %d", uid, base)
	}
	if _, _, err := claimUID(b, base, 1); err == nil {
		t.Fatal("a second state directory claimed a uid that a live VM holds")
	}
	release()
	uid2, release2, err := claimUID(b, base, 1)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	defer release2()
	if uid2 != base {
		t.Fatalf("claimed %d, want %d", uid2, base)
	}
	if left, _ := os.ReadDir(vmsDir(a)); len(left) != 0 {
		t.Errorf("released claim left %v", left)
	}
}
