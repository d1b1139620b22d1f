package wasm

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/wovyr/wovyr/sandbox"
)

// workspace is one invocation's read-write directory, preopened at /workspace.
// It is a tmpfs of its own, sized to Limits.Disk with an inode bound, so a
// guest that fills it gets ENOSPC and the host's disk is untouched.
type workspace struct {
	dir     string
	mounted bool
}

// mountSource names every workspace mount, so Reconcile can find leftovers.
const mountSource = "wovyr-wasm"

func newWorkspace(parent string, files []sandbox.File, disk int64, quota bool) (*workspace, error) {
	dir, err := os.MkdirTemp(parent, "wovyr-wasm-")
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "wasm: workspace")
	}
	w := &workspace{dir: dir}
	if !quota { // positive controls only
		if err := w.write(files); err != nil {
			w.remove()
			return nil, err
		}
		return w, nil
	}
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0700", disk, inodes(disk))
	if err := syscall.Mount(mountSource, dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, opts); err != nil {
		w.remove()
		return nil, sandbox.Wrap(sandbox.Unenforceable, err, "wasm: the workspace disk quota needs a tmpfs mount (run as root)")
	}
	w.mounted = true
	if err := w.write(files); err != nil {
		w.remove()
		return nil, err
	}
	return w, nil
}

// inodes bounds the files in a workspace: one per 4 KiB of quota, at least 64.
func inodes(disk int64) int64 { return max(64, disk/4096) }

func (w *workspace) write(files []sandbox.File) error {
	root, err := os.OpenRoot(w.dir)
	if err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "wasm: workspace")
	}
	defer root.Close()
	for _, f := range files {
		if err := sandbox.ValidatePath(f.Path); err != nil {
			return err
		}
		if d := path.Dir(f.Path); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return sandbox.Wrap(sandbox.BadInput, err, "workspace file %q", f.Path)
			}
		}
		mode := fs.FileMode(f.Mode)
		if mode == 0 {
			mode = 0o644
		}
		fh, err := root.OpenFile(f.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, mode)
		if err != nil {
			return sandbox.Wrap(sandbox.BadInput, err, "workspace file %q", f.Path)
		}
		_, err = fh.Write(f.Data)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return sandbox.Wrap(sandbox.BackendFailure, err, "workspace file %q", f.Path)
		}
	}
	return nil
}

// collect reads back the named files. It never follows a symlink the guest
// may have planted: the walk is confined to the workspace (os.Root) and the
// last component is opened with O_NOFOLLOW; only regular files are returned.
// Files that are absent or not regular are skipped and listed in skipped.
func (w *workspace) collect(paths []string, budget int64, follow bool) (out []sandbox.File, skipped []string, err error) {
	root, err := os.OpenRoot(w.dir)
	if err != nil {
		return nil, nil, sandbox.Wrap(sandbox.BackendFailure, err, "wasm: workspace")
	}
	defer root.Close()
	for _, p := range paths {
		var fh *os.File
		if follow { // positive controls only: trust the guest's links
			fh, err = os.Open(filepath.Join(w.dir, p))
		} else {
			fh, err = root.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		}
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: %v", p, errors.Unwrap(err)))
			continue
		}
		fi, err := fh.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			fh.Close()
			skipped = append(skipped, p+": not a regular file")
			continue
		}
		data, err := io.ReadAll(io.LimitReader(fh, budget+1))
		fh.Close()
		if err != nil {
			return nil, skipped, sandbox.Wrap(sandbox.BackendFailure, err, "collect %q", p)
		}
		if int64(len(data)) > budget {
			skipped = append(skipped, p+": collected files exceed the size bound")
			continue
		}
		budget -= int64(len(data))
		out = append(out, sandbox.File{Path: p, Data: data, Mode: uint32(fi.Mode().Perm())})
	}
	return out, skipped, nil
}

func (w *workspace) remove() error {
	if !w.mounted { // only positive controls skip the tmpfs
		return os.RemoveAll(w.dir)
	}
	if err := syscall.Unmount(w.dir, syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount workspace: %w", err)
	}
	w.mounted = false
	return os.Remove(w.dir)
}

// unmountUnder detaches every workspace mount below dir (Reconcile).
func unmountUnder(dir string) (int, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 2 || g[0] != "tmpfs" || g[1] != mountSource {
			continue
		}
		mp := unescapeMount(f[4])
		if filepath.Dir(mp) != dir || !strings.HasPrefix(filepath.Base(mp), "wovyr-wasm-") {
			continue
		}
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for space, …).
func unescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
