// Package netns creates, enters and removes named network namespaces without
// shelling out. Entering happens on a locked OS thread that is discarded if
// it cannot return to its original namespace, so no goroutine ever runs in a
// namespace it did not ask for.
package netns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Dir is where named network namespaces live (the iproute2 convention,
// so `ip netns` lists wovyr's namespaces too).
const Dir = "/run/netns"

// Path returns the bind-mount path of the named netns.
func Path(name string) string { return filepath.Join(Dir, name) }

// Create makes a new named network namespace, bind-mounted at
// /run/netns/name, and runs setup inside it (on a locked thread that returns
// to its own namespace afterwards, or is retired if it cannot).
func Create(name string, setup func() error) error {
	if err := ensureDir(); err != nil {
		return err
	}
	p := Path(name)
	f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("create netns file %s: %w", p, err)
	}
	f.Close()
	err = onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare netns: %w", err)
		}
		src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err := unix.Mount(src, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind netns to %s: %w", p, err)
		}
		if setup != nil {
			return setup()
		}
		return nil
	})
	if err != nil {
		_ = Delete(name)
		return err
	}
	return nil
}

// Delete unmounts and removes a named netns. A missing one is not an error.
func Delete(name string) error {
	p := Path(name)
	err := unix.Unmount(p, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", p, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return nil
}

// ensureDir makes /run/netns a shared mount point, as iproute2 does, so
// namespaces mounted there are visible from other mount namespaces.
func ensureDir() error {
	if err := os.MkdirAll(Dir, 0o755); err != nil {
		return err
	}
	err := unix.Mount("", Dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) {
		if err := unix.Mount(Dir, Dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", Dir, err)
		}
		err = unix.Mount("", Dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	}
	if err != nil {
		return fmt.Errorf("make %s shared: %w", Dir, err)
	}
	return nil
}

// Do runs fn on a thread that has joined the netns at path; "" means the
// current one. Sockets and /proc/sys/net files opened by fn belong to that
// namespace and keep it after fn returns.
func Do(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", path, err)
	}
	defer unix.Close(target)
	return onThread(func() error {
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("setns %s: %w", path, err)
		}
		return fn()
	})
}

// onThread runs fn on a locked OS thread and then returns the thread to the
// network namespace it started in. If it cannot, the goroutine exits still
// locked and the runtime retires the thread, so no goroutine ever runs in a
// namespace it did not ask for. (A thread is never left in another
// namespace on purpose either: it may be the main thread, whose namespace
// /proc/<pid>/ns/net reports for the whole process.)
func onThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer unix.Close(orig)
		ferr := fn()
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("setns back: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Sysctl writes value to /proc/sys/<key> (key uses '/' separators) in the
// calling thread's network namespace.
func Sysctl(key, value string) error {
	if err := os.WriteFile(filepath.Join("/proc/sys", key), []byte(value), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", key, value, err)
	}
	return nil
}

// List returns the names of the namespaces in Dir that start with prefix.
func List(prefix string) ([]string, error) {
	ents, err := os.ReadDir(Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}
