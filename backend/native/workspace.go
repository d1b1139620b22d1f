package native

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/sandbox"
)

// inodesFor bounds files in a workspace (BATTERY 53): one inode per 4 KiB
// of disk quota, at least 1024, so a million empty files cannot pin memory.
// Size zero (positive controls only) means no limit at all.
func inodesFor(size int64) int64 {
	if size == 0 {
		return 0
	}
	return max(size/4096, 1024)
}

// mountWorkspace mounts a tmpfs of size bytes, owned by uid:gid, at dir.
// tmpfs pages are charged to the writer's memory cgroup, and size makes the
// disk limit a hard ENOSPC rather than a host disk filling up.
func mountWorkspace(dir string, size int64, uid, gid uint32) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0700,uid=%d,gid=%d", size, inodesFor(size), uid, gid)
	if err := unix.Mount("wovyr-ws", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		os.Remove(dir)
		return fmt.Errorf("workspace: mount tmpfs: %w", err)
	}
	return nil
}

// resizeWorkspace sets the tmpfs size to the invocation's disk limit.
func resizeWorkspace(dir string, size int64) error {
	opts := fmt.Sprintf("size=%d,nr_inodes=%d", size, inodesFor(size))
	if err := unix.Mount("wovyr-ws", dir, "tmpfs", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("workspace: resize: %w", err)
	}
	return nil
}

// unmountWorkspace detaches the tmpfs (lazily, so a stray open file cannot
// pin it) and removes the mount point.
func unmountWorkspace(dir string) error {
	err := unix.Unmount(dir, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("workspace: unmount %s: %w", dir, err)
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("workspace: %w", err)
	}
	return nil
}

// writeFiles writes the invocation's input files, confined to the workspace,
// owned by the workload's uid.
func writeFiles(dir string, files []sandbox.File, uid, gid uint32) error {
	if len(files) == 0 {
		return nil
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, f := range files {
		if d := filepath.Dir(f.Path); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return sandbox.Wrap(sandbox.BadInput, err, "file %s", f.Path)
			}
			if err := chownTree(root, d, uid, gid); err != nil {
				return err
			}
		}
		mode := os.FileMode(f.Mode)
		if mode == 0 {
			mode = 0o644
		}
		if err := root.WriteFile(f.Path, f.Data, mode); err != nil {
			return sandbox.Wrap(sandbox.BadInput, err, "file %s", f.Path)
		}
		if err := root.Lchown(f.Path, int(uid), int(gid)); err != nil {
			return err
		}
	}
	return nil
}

func chownTree(root *os.Root, d string, uid, gid uint32) error {
	parts := strings.Split(d, "/")
	for i := range parts {
		if err := root.Lchown(strings.Join(parts[:i+1], "/"), int(uid), int(gid)); err != nil {
			return err
		}
	}
	return nil
}

// collectFiles reads the requested files back through an os.Root, so a
// symlink the workload planted cannot make wovyr read outside the
// workspace. Missing files are skipped; the caller sees which came back.
func collectFiles(dir string, paths []string, limit int64) ([]sandbox.File, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	var out []sandbox.File
	for _, p := range paths {
		f, err := root.Open(p)
		if err != nil {
			continue // absent, or an escaping link: not returned
		}
		st, err := f.Stat()
		if err != nil || !st.Mode().IsRegular() {
			f.Close()
			continue
		}
		data, err := io.ReadAll(io.LimitReader(f, limit))
		f.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, sandbox.File{Path: p, Data: data, Mode: uint32(st.Mode().Perm())})
	}
	return out, nil
}

// reconcileScratch unmounts and removes every workspace under scratch.
func reconcileScratch(scratch string) error {
	entries, err := os.ReadDir(scratch)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if err := unmountWorkspace(filepath.Join(scratch, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
