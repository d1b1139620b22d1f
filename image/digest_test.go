package image

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestInstallRecordsDigest: a built template carries its tree's digest,
// and Digest reads it back.
func TestInstallRecordsDigest(t *testing.T) {
	dir := t.TempDir()
	if err := Build(context.Background(), "busybox", dir, io.Discard); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "busybox", DigestFile))
	if err != nil {
		t.Fatal(err)
	}
	tree, err := TreeDigest(RootFS(dir, "busybox"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != tree+"\n" || !strings.HasPrefix(tree, "sha256:") || len(tree) != len("sha256:")+64 {
		t.Fatalf("recorded %q, tree %q", b, tree)
	}
	if d, err := Digest(dir, "busybox"); err != nil || d != tree {
		t.Fatalf("Digest = %q, %v; want %q", d, err, tree)
	}
}

// TestDigestOfTemplateWithoutRecord: a template made before digests were
// recorded gets its tree's; an unknown one is ErrNotFound.
func TestDigestOfTemplateWithoutRecord(t *testing.T) {
	dir := t.TempDir()
	root := RootFS(dir, "old")
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	tree, err := TreeDigest(root)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := Digest(dir, "old"); err != nil || d != tree {
		t.Fatalf("Digest = %q, %v; want %q", d, err, tree)
	}
	for _, name := range []string{"nope", "../old", ""} {
		if _, err := Digest(dir, name); !errors.Is(err, ErrNotFound) {
			t.Errorf("Digest(%q) = %v, want ErrNotFound", name, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "old", DigestFile), []byte("sha256:zz\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Digest(dir, "old"); err == nil || !strings.Contains(err.Error(), "malformed digest file") {
		t.Errorf("malformed record: %v", err)
	}
}

// TestTreeDigestSeesWhatTheDiskHolds: the same tree hashes the same; each
// thing a root disk keeps changes the digest.
func TestTreeDigestSeesWhatTheDiskHolds(t *testing.T) {
	root := t.TempDir()
	at := time.Unix(1700000000, 0)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(root, "f"), []byte("one"), 0o644))
	must(os.Symlink("f", filepath.Join(root, "l")))
	must(os.Chtimes(filepath.Join(root, "f"), at, at))
	digest := func() string {
		t.Helper()
		d, err := TreeDigest(root)
		must(err)
		return d
	}
	seen := map[string]string{digest(): "initial"}
	if d := digest(); seen[d] != "initial" {
		t.Fatal("the same tree gave another digest")
	}
	changes := []struct {
		name string
		do   func() error
	}{
		{"contents", func() error { return os.WriteFile(filepath.Join(root, "f"), []byte("two"), 0o644) }},
		{"mtime", func() error { return os.Chtimes(filepath.Join(root, "f"), at, at.Add(time.Second)) }},
		{"mode", func() error { return os.Chmod(filepath.Join(root, "f"), 0o600) }},
		{"owner", func() error { return os.Lchown(filepath.Join(root, "f"), 1, 1) }},
		{"link target", func() error {
			os.Remove(filepath.Join(root, "l"))
			return os.Symlink("/etc/passwd", filepath.Join(root, "l"))
		}},
		{"xattr", func() error { return setXattr(filepath.Join(root, "f"), "user.wovyr", "x") }},
		{"new entry", func() error { return os.Mkdir(filepath.Join(root, "d"), 0o755) }},
	}
	for _, c := range changes {
		must(c.do())
		d := digest()
		if prev, ok := seen[d]; ok {
			t.Errorf("changing the %s kept the digest of %q", c.name, prev)
		}
		seen[d] = c.name
	}
}

func setXattr(p, name, value string) error { return unix.Lsetxattr(p, name, []byte(value), 0) }
