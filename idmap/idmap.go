// Package idmap makes idmapped mounts: a view of a directory tree in which
// file owners are shifted into a host uid/gid range, so one root-owned,
// read-only template can serve many user-namespaced sandboxes, each with its
// own unprivileged host range, without copying a byte.
//
// # Why not the runtimes' own idmap options
//
// runc 1.1.5 ignores them silently and crun 1.8.1 honours them only on bind
// mounts, so the mapping is made here, with mount_setattr(MOUNT_ATTR_IDMAP),
// before the runtime ever sees the root filesystem.
//
// It refuses to idmap overlay mounts themselves (the kernel returns EINVAL):
// idmap the lower layer instead.
package idmap

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// Range maps container ids [0, Size) to host ids [HostUID, HostUID+Size).
type Range struct {
	HostUID uint32
	HostGID uint32
	Size    uint32
}

// Valid reports whether r is a usable, unprivileged range: it must not
// include host root and must not wrap.
func (r Range) Valid() bool {
	return r.Size > 0 && r.HostUID > 0 && r.HostGID > 0 &&
		uint64(r.HostUID)+uint64(r.Size) <= 1<<32-1 && uint64(r.HostGID)+uint64(r.Size) <= 1<<32-1
}

// Userns returns a file referring to a new user namespace with r's mapping.
// The caller closes it. It costs one short-lived child process, which is
// stopped by ptrace at its execve and killed before anything of it runs.
func Userns(r Range) (*os.File, error) {
	if !r.Valid() {
		return nil, fmt.Errorf("idmap: invalid range %+v", r)
	}
	// The tracer of a PTRACE_TRACEME child is the starting thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.Command("/proc/self/exe")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(r.HostUID), Size: int(r.Size)}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(r.HostGID), Size: int(r.Size)}},
		Ptrace:      true,
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("idmap: start userns holder: %w", err)
	}
	f, openErr := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if openErr != nil {
		return nil, fmt.Errorf("idmap: open userns: %w", openErr)
	}
	return f, nil
}

// Attrs are extra mount attributes for the idmapped mount.
const (
	ReadOnly = unix.MOUNT_ATTR_RDONLY
	NoSuid   = unix.MOUNT_ATTR_NOSUID
	NoDev    = unix.MOUNT_ATTR_NODEV
)

// Mount makes an idmapped, recursive clone of src at dst (an existing
// directory) using the mapping of the user namespace userns, with the extra
// attributes attrs (ReadOnly, NoSuid, NoDev).
func Mount(src, dst string, userns *os.File, attrs uint64) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("idmap: open_tree %s: %w", src, err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | attrs, Userns_fd: uint64(userns.Fd())}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("idmap: mount_setattr %s (the filesystem may not support idmapped mounts): %w", src, err)
		}
		return fmt.Errorf("idmap: mount_setattr %s: %w", src, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("idmap: move_mount to %s: %w", dst, err)
	}
	return nil
}
