package snapshot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAudit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "golden")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pages.img"), []byte("state"), 0o600); err != nil {
		t.Fatal(err)
	}
	if bad := Audit(dir, []byte("CANARY")); len(bad) != 0 {
		t.Fatalf("a private, clean golden: %q", bad)
	}
	if err := os.WriteFile(filepath.Join(dir, "checkpoint.img"), []byte("..CANARY.."), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := Audit(dir, []byte("CANARY"))
	if len(bad) != 2 || !strings.Contains(bad[0], "checkpoint.img is -rw-r--r--") || bad[1] != "a canary in the golden's checkpoint.img" {
		t.Fatalf("a readable file with a canary: %q", bad)
	}
}
