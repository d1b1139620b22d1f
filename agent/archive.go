package agent

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/sandbox"
)

// maxArchiveEntries bounds the entries of one archive, either way.
const maxArchiveEntries = 100000

// ArchiveDir is FileArchive (and, on the client's side, the CLI's cp -r):
// the tree at p (the workspace for "" or ".") as a tar archive, its names
// relative to p. Regular files, directories and symlinks (as links, never
// followed) go in with their permission bits and times; other entries
// (FIFOs, sockets, devices) are left out.
// The archive is at most max bytes (zero: sandbox.MaxFileBytes); a larger
// tree is an error, not a cut archive.
func ArchiveDir(root *os.Root, p string, max int64) ([]byte, error) {
	if p == "" {
		p = "."
	}
	if max == 0 {
		max = sandbox.MaxFileBytes
	}
	if fi, err := root.Lstat(p); err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", p)
	}
	var buf bytes.Buffer
	out := &boundedWriter{w: &buf, left: max}
	tw := tar.NewWriter(out)
	n := 0
	err := fs.WalkDir(root.FS(), p, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if name == p {
			return nil
		}
		if n++; n > maxArchiveEntries {
			return fmt.Errorf("%s has more than %d entries", p, maxArchiveEntries)
		}
		fi, err := d.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		rel, _ := filepath.Rel(p, name)
		var link string
		switch m := fi.Mode(); {
		case m.IsRegular(), m.IsDir():
		case m&fs.ModeSymlink != 0:
			if link, err = root.Readlink(name); err != nil {
				return err
			}
		default:
			return nil
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name, h.Uname, h.Gname, h.Uid, h.Gid = filepath.ToSlash(rel), "", "", 0, 0
		h.Mode &= 0o777
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := root.OpenFile(name, os.O_RDONLY|noBlockNoFollow, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, io.LimitReader(f, h.Size))
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if errors.Is(err, errArchiveTooLarge) {
		return nil, fmt.Errorf("%s makes an archive over the %d-byte limit", p, max)
	}
	return buf.Bytes(), err
}

// ExtractInto is FileExtract (and, on the client's side, the CLI's cp -r):
// the tar archive data written under p (made if missing). Every entry is
// checked before anything is written: a name that leaves p (.., absolute)
// or an entry that is not a regular file, a directory or a symlink (hard
// links, devices, FIFOs) refuses the whole archive. Writing goes through os.Root, so nothing lands outside the
// workspace even through a symlink the archive or the session made;
// permission bits only (no setuid, no owners).
func ExtractInto(root *os.Root, p string, data []byte) error {
	if p == "" {
		p = "."
	}
	var ents []entry
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("not a tar archive: %w", err)
		}
		if len(ents) == maxArchiveEntries {
			return fmt.Errorf("the archive has more than %d entries", maxArchiveEntries)
		}
		name := path.Clean(h.Name)
		if name == "." {
			continue
		}
		if err := sandbox.ValidatePath(name); err != nil {
			var se *sandbox.Error
			if errors.As(err, &se) {
				return fmt.Errorf("archive entry %q: %s", h.Name, se.Msg)
			}
			return fmt.Errorf("archive entry %q: %w", h.Name, err)
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink:
		default:
			return fmt.Errorf("archive entry %q: type %q is not a file, a directory or a symlink", h.Name, h.Typeflag)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			return fmt.Errorf("archive entry %q: %w", h.Name, err)
		}
		h.Name = name
		ents = append(ents, entry{h, body})
	}
	if err := checkExtract(root, p, ents); err != nil {
		return err
	}
	if err := root.MkdirAll(p, 0o755); err != nil {
		return err
	}
	for _, e := range ents {
		dst := path.Join(p, e.h.Name)
		mode := os.FileMode(e.h.Mode) & 0o777
		if err := root.MkdirAll(path.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("%s: %w", e.h.Name, err)
		}
		var err error
		switch e.h.Typeflag {
		case tar.TypeDir:
			if err = root.MkdirAll(dst, mode|0o700); err == nil {
				err = chmodDir(root, dst, mode|0o700)
			}
		case tar.TypeSymlink:
			_ = root.Remove(dst)
			err = root.Symlink(e.h.Linkname, dst)
		default:
			err = writeMode(root, dst, e.body, mode)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", e.h.Name, err)
		}
	}
	return nil
}

// Modes are set through a descriptor: gVisor's Sentry refuses a chmod by
// path relative to a directory (os.Root's fchmodat) with EPERM.

// chmodDir sets directory p's mode, which keeps its owner's rwx.
func chmodDir(root *os.Root, p string, mode os.FileMode) error {
	f, err := root.OpenFile(p, os.O_RDONLY|noBlockNoFollow|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Chmod(mode)
}

// writeMode writes regular file p (replacing it, never through a final
// symlink) with exactly mode.
func writeMode(root *os.Root, p string, data []byte, mode os.FileMode) error {
	f, err := root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|noBlockNoFollow, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// entry is one checked archive entry, read whole.
type entry struct {
	h    *tar.Header
	body []byte
}

// checkExtract refuses, before anything is written, an archive that could
// only be extracted in part: an entry under a symlink (the archive's or
// the workspace's: os.Root would refuse it halfway) or under a file, and
// a file or a link where the workspace has a directory.
func checkExtract(root *os.Root, p string, ents []entry) error {
	links := map[string]bool{}
	for _, e := range ents {
		if e.h.Typeflag == tar.TypeSymlink {
			links[e.h.Name] = true
		}
	}
	for _, e := range ents {
		for dir := path.Dir(e.h.Name); dir != "."; dir = path.Dir(dir) {
			if links[dir] {
				return fmt.Errorf("archive entry %q lies under the archive's symlink %q", e.h.Name, dir)
			}
		}
		dst := path.Join(p, e.h.Name)
		for dir := path.Dir(dst); ; dir = path.Dir(dir) {
			fi, err := root.Lstat(dir)
			switch {
			case errors.Is(err, fs.ErrNotExist):
			case err != nil:
				return fmt.Errorf("archive entry %q: %w", e.h.Name, err)
			case !fi.IsDir():
				return fmt.Errorf("archive entry %q lies under %s, which is not a directory", e.h.Name, dir)
			}
			if dir == "." {
				break
			}
		}
		if fi, err := root.Lstat(dst); err == nil && fi.IsDir() && e.h.Typeflag != tar.TypeDir {
			return fmt.Errorf("archive entry %q would replace the directory %s", e.h.Name, dst)
		}
	}
	return nil
}

var errArchiveTooLarge = errors.New("archive too large")

// boundedWriter fails once more than left bytes are written.
type boundedWriter struct {
	w    io.Writer
	left int64
}

func (b *boundedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > b.left {
		return 0, errArchiveTooLarge
	}
	b.left -= int64(len(p))
	return b.w.Write(p)
}
