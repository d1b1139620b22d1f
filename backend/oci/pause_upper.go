package oci

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/idmap"
)

// A paused sandbox's upper layer is kept as a POSIX tar made by GNU tar
// as host root: every entry as overlayfs holds it — owners by number,
// modes, nanosecond times (the Sentry revalidates what it cached against
// them on restore), xattrs (trusted.overlay.* marks opaque directories)
// and whiteouts (0:0 character devices). Its names are a real directory's,
// written by wovyr to a root-only file, and unpacked into a fresh tmpfs
// before the overlay over it is mounted: overlayfs forbids changing a
// layer under a mounted overlay.

// tarFlags are the flags that keep what overlayfs needs, both ways.
var tarFlags = []string{"--format=posix", "--numeric-owner", "--xattrs", "--xattrs-include=*", "--sparse"}

// saveUpper writes the tree data to a new file dst (0600).
func saveUpper(ctx context.Context, data, dst string) error {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	// /.wovyr holds only the mount points wovyr makes for every sandbox
	// (mounts.go, wasm.go): the resumed one makes its own.
	args := append([]string{"--create", "--file=-", "--directory=" + data,
		"--anchored", "--exclude=." + filepath.Dir(agentPath)}, tarFlags...)
	if err := runTar(ctx, f, append(args, ".")...); err != nil {
		return err
	}
	return f.Sync()
}

// loadUpper unpacks src into the empty directory data and moves its
// files' owners from the range from to the range to. A device node other
// than a whiteout is refused: no sandbox can make one.
func loadUpper(ctx context.Context, src, data string, from, to idmap.Range) error {
	args := append([]string{"--extract", "--file=" + src, "--directory=" + data, "--same-owner", "--preserve-permissions"}, tarFlags...)
	if err := runTar(ctx, nil, args...); err != nil {
		return err
	}
	return shiftOwners(data, from, to)
}

func runTar(ctx context.Context, stdout *os.File, args ...string) error {
	cmd := exec.CommandContext(ctx, "tar", args...)
	var errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = stdout, &errOut
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("tar: %w: %s", err, bytes.TrimSpace(errOut.Bytes()))
	}
	return nil
}

// shiftOwners moves every owner under root that lies in from to the same
// place in to; owners outside from (host root's mount points) stay. A
// chown clears set-id bits, which are put back.
func shiftOwners(root string, from, to idmap.Range) error {
	if from == to {
		return nil
	}
	move := func(id, base, next uint32) uint32 {
		if id >= base && id-base < from.Size {
			return next + (id - base)
		}
		return id
	}
	return filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		typ := st.Mode & unix.S_IFMT
		if (typ == unix.S_IFCHR || typ == unix.S_IFBLK) && st.Rdev != 0 {
			return fmt.Errorf("%s: a device node in a paused upper layer", p)
		}
		uid, gid := move(st.Uid, from.HostUID, to.HostUID), move(st.Gid, from.HostGID, to.HostGID)
		if uid == st.Uid && gid == st.Gid {
			return nil
		}
		if err := unix.Lchown(p, int(uid), int(gid)); err != nil {
			return err
		}
		if typ != unix.S_IFLNK && st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			return unix.Chmod(p, st.Mode&0o7777)
		}
		return nil
	})
}
