package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Import bounds: a tool template has no business being bigger.
const (
	MaxImportFile  = 1 << 30
	MaxImportTotal = 4 << 30
	maxImportUID   = 65535 // ids above a sandbox's range become nobody
)

// ErrRejected wraps the refusal of a layer for what it holds: bytes that are
// not a tar archive, a path go-containerregistry refuses, a file over the
// bounds. Errors of the filesystem under the template (an entry that would
// resolve outside it, a file where a directory must go) are *fs.PathError
// or *os.LinkError.
var ErrRejected = errors.New("image: layer rejected")

// bounds caps the bytes extract writes, per file and in all. Import uses
// MaxImportFile and MaxImportTotal; tests pass smaller ones.
type bounds struct{ file, total int64 }

// Import creates template name under dir from src: an OCI image layout
// directory (its first linux/amd64 image, or its only one) or a `docker
// save` tarball. Layers are flattened by go-containerregistry; each entry is
// then written through an os.Root (nothing can land outside the template)
// with these defences: a layer with a path that leaves the root is
// rejected (so is the import), device nodes and fifos are dropped, setuid/setgid
// bits cleared, absolute symlinks rewritten relative to the template root,
// owners above 65535 mapped to nobody, and files and the total bounded.
func Import(ctx context.Context, src, name, dir string) error {
	img, err := openImage(src)
	if err != nil {
		return err
	}
	return install(ctx, dir, name, func(root string) error { return extract(ctx, img, root, bounds{MaxImportFile, MaxImportTotal}) })
}

func openImage(src string) (v1.Image, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return nil, fmt.Errorf("image: import: %w", err)
	}
	if !fi.IsDir() {
		img, err := tarball.ImageFromPath(src, nil)
		if err != nil {
			return nil, fmt.Errorf("image: import %s as a docker-save tarball: %w", src, err)
		}
		return img, nil
	}
	idx, err := layout.ImageIndexFromPath(src)
	if err != nil {
		return nil, fmt.Errorf("image: import %s as an OCI layout: %w", src, err)
	}
	for depth := 0; depth < 4; depth++ {
		m, err := idx.IndexManifest()
		if err != nil {
			return nil, err
		}
		var pick *v1.Descriptor
		for i, d := range m.Manifests {
			if d.Platform == nil || (d.Platform.OS == "linux" && d.Platform.Architecture == "amd64") {
				pick = &m.Manifests[i]
				break
			}
		}
		if pick == nil {
			return nil, fmt.Errorf("image: %s has no linux/amd64 image", src)
		}
		if pick.MediaType.IsIndex() {
			if idx, err = idx.ImageIndex(pick.Digest); err != nil {
				return nil, err
			}
			continue
		}
		return idx.Image(pick.Digest)
	}
	return nil, fmt.Errorf("image: %s: indexes nested too deep", src)
}

// extract writes the flattened filesystem of img under rootDir.
func extract(ctx context.Context, img v1.Image, rootDir string, lim bounds) error {
	root, err := os.OpenRoot(rootDir)
	if err != nil {
		return err
	}
	defer root.Close()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			// Extract ends the archive cleanly even when it stopped on a
			// bad layer (e.g. a path traversal); its error comes after.
			if _, err := io.Copy(io.Discard, rc); err != nil {
				return fmt.Errorf("%w: %w", ErrRejected, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: read layers: %w", ErrRejected, err)
		}
		name, ok := cleanEntry(h.Name)
		if !ok {
			continue // the root itself, or a path that leaves it
		}
		if d := path.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("image: %s: %w", name, err)
			}
		}
		mode := fs.FileMode(h.Mode).Perm() // setuid/setgid dropped
		if h.Mode&0o1000 != 0 {
			mode |= fs.ModeSticky
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(name, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("image: %s: %w", name, err)
			}
		case tar.TypeReg:
			if h.Size > lim.file || total+h.Size > lim.total {
				return fmt.Errorf("%w: %s: file of %d bytes exceeds the import bounds", ErrRejected, name, h.Size)
			}
			total += h.Size
			_ = root.Remove(name)
			f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return fmt.Errorf("image: %s: %w", name, err)
			}
			_, err = io.Copy(f, rejecting{io.LimitReader(tr, h.Size)})
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("image: %s: %w", name, err)
			}
		case tar.TypeSymlink:
			_ = root.Remove(name)
			if err := root.Symlink(safeLink(name, h.Linkname), name); err != nil {
				return fmt.Errorf("image: %s: %w", name, err)
			}
		case tar.TypeLink:
			target, ok := cleanEntry(h.Linkname)
			if !ok {
				continue
			}
			_ = root.Remove(name)
			if err := root.Link(target, name); err != nil {
				return fmt.Errorf("image: hard link %s: %w", name, err)
			}
			continue // mode and owner are the target's
		default:
			continue // devices, fifos and the rest: a template needs none
		}
		if h.Typeflag != tar.TypeSymlink {
			if err := root.Chmod(name, mode); err != nil {
				return fmt.Errorf("image: %s: %w", name, err)
			}
		}
		if err := root.Lchown(name, owner(h.Uid), owner(h.Gid)); err != nil {
			return fmt.Errorf("image: %s: %w", name, err)
		}
	}
}

// rejecting marks the layer's read errors (a torn entry) ErrRejected, so
// they read apart from the write errors of the template's filesystem.
type rejecting struct{ r io.Reader }

func (r rejecting) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("%w: %w", ErrRejected, err)
	}
	return n, err
}

// cleanEntry makes a layer path relative to the root; ok is false for the
// root itself or anything that would leave it.
func cleanEntry(p string) (string, bool) {
	p = path.Clean("/" + strings.TrimLeft(p, "/"))
	if p == "/" {
		return "", false
	}
	p = strings.TrimPrefix(p, "/")
	return p, fs.ValidPath(p)
}

// safeLink rewrites an absolute symlink target as a path relative to the
// link's directory, so no host-side reader can be sent out of the template.
func safeLink(name, target string) string {
	if !strings.HasPrefix(target, "/") {
		return target
	}
	rel, err := filepath.Rel(path.Dir("/"+name), path.Clean(target))
	if err != nil {
		return "."
	}
	return rel
}

func owner(id int) int {
	if id < 0 || id > maxImportUID {
		return 65534
	}
	return id
}
