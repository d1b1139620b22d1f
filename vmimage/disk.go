package vmimage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// MakeExt4 builds an ext4 filesystem image of sizeBytes at dst (mode 0600
// when it creates it), populated from src when src is not empty. No journal: the root disk is read-only and
// the scratch disk is thrown away with the VM, so a journal only costs boot
// time (and replay of a guest-written journal is host-side attack surface
// nobody needs).
func MakeExt4(ctx context.Context, src, dst, label string, sizeBytes int64) error {
	if sizeBytes < 1<<20 {
		return fmt.Errorf("vmimage: ext4 image of %d bytes is too small", sizeBytes)
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("vmimage: %w", err)
	}
	err = f.Truncate(sizeBytes)
	f.Close()
	if err != nil {
		return fmt.Errorf("vmimage: %w", err)
	}
	args := []string{"-q", "-F", "-t", "ext4", "-L", label, "-b", "4096", "-m", "0",
		"-O", "^has_journal,^resize_inode", "-E", "root_owner=0:0,lazy_itable_init=1,nodiscard"}
	if src != "" {
		args = append(args, "-d", src)
	}
	args = append(args, dst)
	cmd := exec.CommandContext(ctx, "mkfs.ext4", args...)
	cmd.Env = []string{"PATH=/usr/sbin:/sbin:/usr/bin:/bin", "MKE2FS_CONFIG=/dev/null"}
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(dst)
		return fmt.Errorf("vmimage: mkfs.ext4 %s: %w: %s", dst, err, strings.TrimSpace(string(out)))
	}
	if src == "" {
		return nil
	}
	// mkfs.ext4 -d adds /lost+found, which the template lacks: the VM's
	// root then lists one entry more than the same template's container
	// root (issue #25's tier parity). The disk is never fsck'ed, so it
	// needs none.
	if _, err := os.Lstat(filepath.Join(src, "lost+found")); err == nil {
		return nil
	}
	cmd = exec.CommandContext(ctx, "debugfs", "-w", "-R", "rmdir lost+found", dst)
	cmd.Env = []string{"PATH=/usr/sbin:/sbin:/usr/bin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(dst)
		return fmt.Errorf("vmimage: debugfs rmdir lost+found %s: %w: %s", dst, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// TreeSize estimates the ext4 image size that holds the tree at dir: data
// rounded to blocks, an inode each, and a quarter on top for metadata.
func TreeSize(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		total += 4096 + 256
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			total += (info.Size() + 4095) &^ 4095
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("vmimage: %w", err)
	}
	return total + total/4 + 8<<20, nil
}

// BusyboxRoot populates dir with a minimal root filesystem: a static
// busybox and a link for each of its applets, plus the directories a
// workload expects. It is the default workload root for tests and for nodes
// without other templates.
func BusyboxRoot(ctx context.Context, busybox, dir string) error {
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "etc", "dev", "proc", "sys", "tmp", "workspace", "root"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fmt.Errorf("vmimage: %w", err)
		}
	}
	// os.ModeSticky, not 0o1000: Go's FileMode has its own bit for it, and
	// 0o1777 was silently 0777 (issue #25).
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o777|os.ModeSticky); err != nil {
		return fmt.Errorf("vmimage: %w", err)
	}
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return fmt.Errorf("vmimage: busybox: %w", err)
	}
	if !isStaticELF(bb) {
		return fmt.Errorf("vmimage: %s is not a static busybox (install busybox-static)", busybox)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin/busybox"), bb, 0o755); err != nil {
		return fmt.Errorf("vmimage: %w", err)
	}
	out, err := exec.CommandContext(ctx, busybox, "--list-full").Output()
	if err != nil {
		return fmt.Errorf("vmimage: busybox --list-full: %w", err)
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "bin/busybox" || strings.Contains(applet, "..") {
			continue
		}
		depth := strings.Count(applet, "/")
		target := strings.Repeat("../", depth) + "bin/busybox"
		if err := os.Symlink(target, filepath.Join(dir, applet)); err != nil && !os.IsExist(err) {
			return fmt.Errorf("vmimage: applet %s: %w", applet, err)
		}
	}
	files := map[string]string{
		"etc/passwd":   "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
		"etc/group":    "root:x:0:\nnogroup:x:65534:\n",
		"etc/hostname": "wovyr\n",
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			return fmt.Errorf("vmimage: %w", err)
		}
	}
	return nil
}

// RootDiskFormat names how BuildRootDisk lays a tree out (MakeExt4's
// options, the lost+found removal). A cache of root disks keys on it, so a
// wovyr that changes the layout never boots a disk made the old way.
const RootDiskFormat = "ext4-nojournal-v1"

// ErrRootNotDir is returned when a root disk's source is not a directory
// (a symlink to one included: it is not followed).
var ErrRootNotDir = errors.New("vmimage: root disk source is not a directory")

// BuildRootDisk builds the read-only root disk holding the tree at src into
// dst (mode 0644). It is built in a temporary file beside dst, synced and
// renamed into place, so a reader never sees a partial disk and concurrent
// builders of the same dst each install a whole one. mkfs.ext4 -d copies
// the tree as it is, without root or a loop device: symlinks are copied as
// links, never followed, so nothing outside src reaches the disk.
func BuildRootDisk(ctx context.Context, src, dst string) error {
	return installRootDisk(ctx, src, dst, true)
}

// BuildRootDiskOnce is BuildRootDisk that never replaces a disk at dst:
// when another builder installed one first, that one stays and this
// build is dropped. A cache whose entries are booted from (and captured in
// snapshots) needs a disk, once there, never to change under its name.
func BuildRootDiskOnce(ctx context.Context, src, dst string) error {
	return installRootDisk(ctx, src, dst, false)
}

func installRootDisk(ctx context.Context, src, dst string, replace bool) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return fmt.Errorf("vmimage: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s", ErrRootNotDir, src)
	}
	size, err := TreeSize(src)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(dst), filepath.Base(dst)+TempInfix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return fmt.Errorf("vmimage: %w", err)
	}
	tmp := f.Name()
	f.Close()
	ok := false
	defer func() {
		if !ok {
			os.Remove(tmp)
		}
	}()
	if err := MakeExt4(ctx, src, tmp, "wovyr-root", size); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		return fmt.Errorf("vmimage: %w", err)
	}
	if err := syncFile(tmp); err != nil {
		return err
	}
	if replace {
		err = os.Rename(tmp, dst)
		ok = err == nil
	} else if err = os.Link(tmp, dst); errors.Is(err, fs.ErrExist) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("vmimage: %w", err)
	}
	return syncFile(filepath.Dir(dst))
}

// TempInfix marks BuildRootDisk's temporary files: "<dst>.tmp-<pid>-<random>",
// so a reconciler can tell a dead builder's leftovers from a live one's.
const TempInfix = ".tmp-"

func syncFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("vmimage: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("vmimage: sync %s: %w", p, err)
	}
	return nil
}
