// Package image makes and stores root filesystem templates for the container,
// gvisor and microvm backends: built from Debian packages (Build) or
// imported from an OCI image layout or a `docker save` tarball (Import).
//
// A template is a directory <dir>/<name>/rootfs owned by root, beside its
// digest (<dir>/<name>/digest: TreeDigest of the rootfs, written before the
// template appears), which keys what is derived from it, such as a
// microVM's root disk. Templates are read-only by convention and by
// construction: backends never write into them; the OCI backends mount
// them read-only (idmapped) as the lower layer of a per-invocation overlay,
// the microvm backend copies them into a disk. A template changed in place
// keeps its recorded digest, so replace it instead (image rm, then build or
// import). A template appears atomically: it is built in a
// temporary sibling and renamed into place, so a half-built template is
// never visible and a crash leaves only a "*.tmp-*" directory for Reconcile.
//
// Imports are hostile input. Package go-containerregistry flattens the
// layers (whiteouts, opaque directories); this package then refuses or
// neutralises what a tool template has no use for: device nodes and fifos,
// setuid/setgid bits, entries that leave the root, hard links out of it,
// absolute symlinks (rewritten relative to the template root) and
// over-large files.
package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ValidName reports whether name can name a template.
func ValidName(name string) bool { return nameRE.MatchString(name) && !strings.Contains(name, "..") }

// RootFS is the root filesystem directory of template name under dir.
func RootFS(dir, name string) string { return filepath.Join(dir, name, "rootfs") }

// Exists reports whether template name is present under dir.
func Exists(dir, name string) bool {
	fi, err := os.Stat(RootFS(dir, name))
	return err == nil && fi.IsDir()
}

// ErrExists is returned when a template of that name is already there.
var ErrExists = errors.New("image: template exists")

// Builders are the templates Build knows.
var Builders = []string{"busybox", "base", "python", "node"}

// recipes are the Debian package sets of Build's bookworm templates.
var recipes = map[string][]string{
	"base":   nil,
	"python": {"python3"},
	"node":   {"nodejs"},
}

// Build creates template name under dir: "busybox" (a static busybox, ~2 MB,
// for fast tests), "base" (Debian bookworm minbase via debootstrap, ~200
// MB), "python" (base with python3, ~230 MB, whose warm-up imports json,
// re and subprocess: see WarmupFile) or "node" (base with Node.js). The
// bookworm ones are BuildApt's package sets, cached per machine. Progress
// lines go to progress (nil: discarded).
func Build(ctx context.Context, name, dir string, progress io.Writer) error {
	if progress == nil {
		progress = io.Discard
	}
	if pkgs, ok := recipes[name]; ok {
		return buildApt(ctx, name, dir, pkgs, builtinWarmups[name], progress)
	}
	if name != "busybox" {
		return fmt.Errorf("image: no builder for %q (have %s)", name, strings.Join(Builders, ", "))
	}
	return install(ctx, dir, name, func(root string) error { return buildBusybox(ctx, root, progress) })
}

// install runs fill on a fresh temporary root and renames it into place.
func install(ctx context.Context, dir, name string, fill func(root string) error) error {
	if !ValidName(name) {
		return fmt.Errorf("image: invalid template name %q", name)
	}
	if Exists(dir, name) {
		return fmt.Errorf("%w: %s", ErrExists, name)
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	_ = os.Chmod(dir, 0o711) // sandbox uids must traverse to their template
	tmp, err := os.MkdirTemp(dir, name+".tmp-")
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o711); err != nil {
		return err
	}
	root := filepath.Join(tmp, "rootfs")
	if err := os.Mkdir(root, 0o755); err != nil {
		return err
	}
	if err := fill(root); err != nil {
		return err
	}
	if err := recordDigest(tmp); err != nil {
		return err
	}

	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("image: install %s: %w", name, err)
	}
	ok = true
	return nil
}

// Remove deletes template name.
func Remove(dir, name string) error {
	if !ValidName(name) {
		return fmt.Errorf("image: invalid template name %q", name)
	}
	return os.RemoveAll(filepath.Join(dir, name))
}

// Reconcile removes half-built templates ("<name>.tmp-*") under dir, and
// half-built trees of the package-set cache.
func Reconcile(dir string) error {
	return errors.Join(removeTemps(dir), removeTemps(filepath.Join(dir, aptCacheDir)))
}

func removeTemps(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	var errs []error
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
		}
	}
	return errors.Join(errs...)
}
