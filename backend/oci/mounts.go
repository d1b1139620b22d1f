package oci

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/idmap"
)

// assembleRootfs builds dir/rootfs: the template, idmapped into ids as a
// read-only overlay lower layer, under a throw-away upper layer on a tmpfs
// of disk bytes (DESIGN §5's recipe), which fill, if not nil, fills first
// (a resumed sandbox's, pause.go). dir must exist.
func assembleRootfs(template, dir string, ids idmap.Range, ns *os.File, disk int64, weak battery.Weakness, fill func(data string) error) (err error) {
	naive := weak == NaiveRootfs
	flags, idflags := uintptr(unix.MS_NOSUID|unix.MS_NODEV), uint64(idmap.ReadOnly|idmap.NoSuid|idmap.NoDev)
	if weak == SuidRoot {
		flags, idflags = 0, idmap.ReadOnly // positive control only
	}
	lower, upper, merged := filepath.Join(dir, "lower"), filepath.Join(dir, "upper"), filepath.Join(dir, "rootfs")
	for _, d := range []string{lower, upper, merged} {
		if err := os.Mkdir(d, 0o711); err != nil {
			return err
		}
	}
	opts := fmt.Sprintf("size=%d,mode=0711,nr_inodes=%d", disk, inodesFor(disk))
	if err := unix.Mount("wovyr-upper", upper, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount upper tmpfs: %w", err)
	}
	data, work := filepath.Join(upper, "data"), filepath.Join(upper, "work")
	for _, d := range []string{data, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	// The upper root becomes the sandbox's "/": owned by its root.
	if err := os.Chown(data, int(ids.HostUID), int(ids.HostGID)); err != nil {
		return err
	}
	if fill != nil {
		// A resumed sandbox's upper layer, before the overlay is mounted.
		if err := fill(data); err != nil {
			return fmt.Errorf("upper layer: %w", err)
		}
	}
	if err := idmap.Mount(template, lower, ns, idflags); err != nil {
		return err
	}
	if weak == HostPathLayers { // positive control only
		err = unix.Mount("wovyr-overlay", merged, "overlay", flags, fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, data, work))
	} else {
		err = mountOverlay(merged, lower, data, work, flags)
	}
	// The overlay holds its own reference to the idmapped lower.
	if uerr := unix.Unmount(lower, unix.MNT_DETACH); err == nil && uerr != nil {
		err = uerr
	}
	if err != nil {
		return fmt.Errorf("mount overlay: %w", err)
	}
	// Mount points and the workspace, made here so every runtime finds
	// them — through an os.Root: the template is hostile input, and a
	// symlinked /.wovyr must not steer this root-owned write (row 16).
	if err := agentMountPoint(merged, naive); err != nil {
		return err
	}
	for _, d := range []string{workDir, "/tmp", "/proc", "/dev", "/sys"} {
		p := filepath.Join(merged, d)
		if fi, err := os.Lstat(p); err == nil && !fi.IsDir() {
			return fmt.Errorf("template has a non-directory at %s", d)
		}
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
	}
	return os.Chown(filepath.Join(merged, workDir), int(ids.HostUID), int(ids.HostGID))
}

// mountOverlay mounts the overlay of lower, data and work at merged, naming
// its layers by descriptor (/proc/self/fd/N): overlayfs shows the layer
// names it was given in the sandbox's own /proc/self/mountinfo, and the
// host paths would tell a hostile tool this node's state directory layout
// (issue #25, battery row 44). The kernel resolves the names at mount time;
// the descriptors are closed once it is done.
func mountOverlay(merged, lower, data, work string, flags uintptr) error {
	var names [3]string
	for i, d := range []string{lower, data, work} {
		fd, err := unix.Open(d, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			return fmt.Errorf("open overlay layer: %w", err)
		}
		defer unix.Close(fd)
		names[i] = "/proc/self/fd/" + strconv.Itoa(fd)
	}
	ov := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", names[0], names[1], names[2])
	return unix.Mount("wovyr-overlay", merged, "overlay", flags, ov)
}

// userns returns a user namespace mapping ids, made once per range and kept
// while the backend lives (one descriptor per uid slot): an idmapped mount
// needs one, and making it forks and execs a holder process (~1–3 ms).
func (b *Backend) userns(ids idmap.Range) (*os.File, error) {
	b.nsMu.Lock()
	defer b.nsMu.Unlock()
	if f, ok := b.nsCache[ids]; ok {
		return f, nil
	}
	f, err := idmap.Userns(ids)
	if err != nil {
		return nil, err
	}
	if b.nsCache == nil {
		b.nsCache = map[idmap.Range]*os.File{}
	}
	b.nsCache[ids] = f
	return f, nil
}

// agentMountPoint creates /.wovyr/agent in the merged root. naive (the
// NaiveRootfs control only) follows the template's symlinks from the host.
func agentMountPoint(merged string, naive bool) error {
	if naive {
		if err := os.MkdirAll(filepath.Join(merged, ".wovyr"), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(merged, agentPath), nil, 0o555)
	}
	root, err := os.OpenRoot(merged)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.MkdirAll(".wovyr", 0o755); err != nil {
		return fmt.Errorf("template's /.wovyr: %w", err)
	}
	if err := root.WriteFile(strings.TrimPrefix(agentPath, "/"), nil, 0o555); err != nil {
		return fmt.Errorf("template's %s: %w", agentPath, err)
	}
	return nil
}

// inodesFor bounds the upper layer's inodes in proportion to its size, so an
// inode flood hits ENOSPC (one inode per 4 KiB, at least 4096).
func inodesFor(disk int64) int64 { return max(disk/4096, 4096) }

// resizeUpper changes the upper layer's size limit (claim-time Disk).
func resizeUpper(dir string, disk int64) error {
	opts := fmt.Sprintf("size=%d,nr_inodes=%d", disk, inodesFor(disk))
	return unix.Mount("", filepath.Join(dir, "upper"), "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, opts)
}

// removeScratch detaches every mount under dir, deepest first, and removes
// dir. It refuses to remove anything while a mount below dir remains, so it
// can never delete through into a template or the host.
func removeScratch(dir string) error {
	var errs []error
	for _, m := range mountsUnder(dir) {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	if left := mountsUnder(dir); len(left) > 0 {
		return errors.Join(append(errs, fmt.Errorf("mounts remain under %s: %v", dir, left))...)
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// mountsUnder lists mount points at or below dir in this mount namespace,
// deepest first.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return slices.Compact(out)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, …).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
