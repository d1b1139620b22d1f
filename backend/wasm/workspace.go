package wasm

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"syscall"

	"github.com/wovyr/wovyr/sandbox"
)

// workspace is one invocation's read-write directory, preopened at /work.
type workspace struct {
	dir string
}

func newWorkspace(parent string, files []sandbox.File) (*workspace, error) {
	dir, err := os.MkdirTemp(parent, "wovyr-wasm-")
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "wasm: workspace")
	}
	w := &workspace{dir: dir}
	if err := w.write(files); err != nil {
		w.remove()
		return nil, err
	}
	return w, nil
}

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

func (w *workspace) remove() error { return os.RemoveAll(w.dir) }
