package vmimage_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/vmimage"
)

// debugfs runs one debugfs request against an ext4 image.
func debugfs(t *testing.T, disk, req string) string {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", req, disk).Output()
	if err != nil {
		t.Fatalf("debugfs %s: %v", req, err)
	}
	return string(out)
}

// TestBuildRootDiskCopiesSymlinksNotTheirTargets: a template's links to
// host paths reach the disk as links; the host files they name do not.
func TestBuildRootDiskCopiesSymlinksNotTheirTargets(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "host-secret")
	if err := os.WriteFile(secret, []byte("host only\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "rootfs")
	for _, d := range []string{"etc", "sub"} {
		if err := os.MkdirAll(filepath.Join(src, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "etc/marker"), []byte("in the template\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"abs": secret, "sub/rel": "../../host-secret", "hostdir": dir} {
		if err := os.Symlink(target, filepath.Join(src, link)); err != nil {
			t.Fatal(err)
		}
	}
	disk := filepath.Join(dir, "out", "root.ext4")
	os.Mkdir(filepath.Dir(disk), 0o755)
	if err := vmimage.BuildRootDisk(context.Background(), src, disk); err != nil {
		t.Fatal(err)
	}
	if got := debugfs(t, disk, "cat /etc/marker"); got != "in the template\n" {
		t.Errorf("marker %q", got)
	}
	for link, target := range map[string]string{"/abs": secret, "/sub/rel": "../../host-secret", "/hostdir": dir} {
		// A target of 60 bytes or more is kept in a data block, which
		// debugfs's cat prints; a shorter one is in the inode itself.
		st := debugfs(t, disk, "stat "+link)
		dest := strings.Contains(st, `Fast link dest: "`+target+`"`) || debugfs(t, disk, "cat "+link) == target
		if !strings.Contains(st, "Type: symlink") || !dest {
			t.Errorf("%s on the disk is not the link to %s:\n%s", link, target, st)
		}
	}
	if got := debugfs(t, disk, "ls /"); strings.Contains(got, "host-secret") || strings.Contains(got, "lost+found") {
		t.Errorf("root listing %q", got)
	}
	fi, err := os.Stat(disk)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("disk %v %v", fi, err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(disk)); len(ents) != 1 {
		t.Errorf("the build left %d files, want the disk only", len(ents))
	}
}

// TestBuildRootDiskRefusesSymlinkedRoot: a source that is a link to a
// directory is not followed.
func TestBuildRootDiskRefusesSymlinkedRoot(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "rootfs")
	if err := os.Symlink("/etc", link); err != nil {
		t.Fatal(err)
	}
	err := vmimage.BuildRootDisk(context.Background(), link, filepath.Join(dir, "root.ext4"))
	if !errors.Is(err, vmimage.ErrRootNotDir) {
		t.Fatalf("err %v, want ErrRootNotDir", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("a refused build left files: %v", ents)
	}
}
