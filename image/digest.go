package image

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// DigestFile holds a template's digest, next to its rootfs: written by
// install when the template appears, one line "sha256:<hex>".
const DigestFile = "digest"

// ErrNotFound is returned for a template name the store does not hold.
var ErrNotFound = errors.New("image: no such template")

// treeDigestVersion names the tree encoding TreeDigest hashes; changing the
// encoding changes every digest, so nothing keyed by an old one is reused.
const treeDigestVersion = "wovyr-tree-v1"

// Digest is template name's digest: the recorded one, or for a template
// installed before digests were recorded, TreeDigest of its rootfs (which
// reads the whole tree; the caller may keep it while the template directory
// is unchanged). A name the store lacks is ErrNotFound.
func Digest(dir, name string) (string, error) {
	if !ValidName(name) {
		return "", fmt.Errorf("%w: invalid name %q", ErrNotFound, name)
	}
	if !Exists(dir, name) {
		return "", fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	b, err := os.ReadFile(filepath.Join(dir, name, DigestFile))
	switch {
	case err == nil:
		d := strings.TrimSpace(string(b))
		if !validDigest(d) {
			return "", fmt.Errorf("image: template %s: malformed %s file", name, DigestFile)
		}
		return d, nil
	case errors.Is(err, fs.ErrNotExist):
		return TreeDigest(RootFS(dir, name))
	default:
		return "", fmt.Errorf("image: template %s: %w", name, err)
	}
}

func validDigest(d string) bool {
	h, ok := strings.CutPrefix(d, "sha256:")
	_, err := hex.DecodeString(h)
	return ok && err == nil && len(h) == 2*sha256.Size
}

// recordDigest writes the digest of the tree at <tmp>/rootfs into tmp.
func recordDigest(tmp string) error {
	d, err := TreeDigest(filepath.Join(tmp, "rootfs"))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(tmp, DigestFile), []byte(d+"\n"), 0o644)
}

// TreeDigest hashes the tree at root as a root disk built from it would
// hold it: every entry's path, type and mode bits, owner, modification
// time and extended attributes, a regular file's contents, a symlink's
// target (never followed), a device's number. The walk is in lexical order,
// so the same tree always gives the same digest.
func TreeDigest(root string) (string, error) {
	h := sha256.New()
	io.WriteString(h, treeDigestVersion+"\n")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return &fs.PathError{Op: "lstat", Path: p, Err: err}
		}
		// A directory's size is its filesystem's business (mkfs does not
		// keep it); a regular file's frames its contents in the stream.
		var size uint64
		if st.Mode&syscall.S_IFMT == syscall.S_IFREG {
			size = uint64(st.Size)
		}
		io.WriteString(h, rel+"\x00")
		binary.Write(h, binary.BigEndian, []uint64{uint64(st.Mode), uint64(st.Uid), uint64(st.Gid),
			uint64(st.Mtim.Sec), uint64(st.Mtim.Nsec), st.Rdev, size})
		if err := hashXattrs(h, p); err != nil {
			return err
		}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			io.WriteString(h, target+"\x00")
		case syscall.S_IFREG:
			f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
			if err != nil {
				return err
			}
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("image: digest %s: %w", root, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// hashXattrs adds p's extended attributes (names sorted) to h: mkfs.ext4
// -d copies them onto the disk, file capabilities among them.
func hashXattrs(h io.Writer, p string) error {
	n, err := unix.Llistxattr(p, nil)
	if errors.Is(err, unix.ENOTSUP) || (err == nil && n == 0) {
		return nil
	}
	buf := make([]byte, n)
	if err == nil {
		n, err = unix.Llistxattr(p, buf)
	}
	if err != nil {
		return &fs.PathError{Op: "llistxattr", Path: p, Err: err}
	}
	var names []string
	for _, b := range bytes.Split(buf[:n], []byte{0}) {
		if len(b) > 0 {
			names = append(names, string(b))
		}
	}
	sort.Strings(names)
	for _, name := range names {
		m, err := unix.Lgetxattr(p, name, nil)
		v := make([]byte, m)
		if err == nil {
			m, err = unix.Lgetxattr(p, name, v)
		}
		if err != nil {
			return &fs.PathError{Op: "lgetxattr " + name, Path: p, Err: err}
		}
		io.WriteString(h, name+"\x00")
		binary.Write(h, binary.BigEndian, uint32(m))
		h.Write(v[:m])
	}
	return nil
}
