package microvm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/wovyr/wovyr/image"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/vmimage"
)

// disks is the cache of root disks built from the node's templates, one
// read-only ext4 file per template at dir/<template>/<key>.ext4.
//
// # Why lazily, on first use
//
// A template is made by `wovyr image build` or `image import`, which serve
// every tier and know nothing of VMs; building a disk for each template
// there would cost every node the time and space of disks it may never
// boot, and would leave templates made before this cache without one. So
// the first microVM Prepare of a template builds its disk (a pool pays it
// while refilling, before any request waits), and later ones reuse it.
//
// The key is what the disk's bytes depend on: the template's digest and
// vmimage.RootDiskFormat. The guest agent is not on the disk (it lives in
// the microVM image's initramfs, checked at probe), so a new wovyr-guest
// does not rebuild every disk. A template's other keys are removed when a
// new one is built, and templates that are gone at start-up (reconcile).
type disks struct {
	dir       string // the cache
	templates string // the image store (image.RootFS)
	log       *slog.Logger

	mu      sync.Mutex
	locks   map[string]*sync.Mutex // per template: one build at a time in this process
	digests map[string]treeMemo    // computed digests of templates with none recorded
}

// treeMemo is a digest computed from a template's tree, valid while the
// template's directory is the same one (a replaced template is a new
// directory: install renames it into place).
type treeMemo struct {
	dev, ino uint64
	ctime    syscall.Timespec
	digest   string
}

func newDisks(dir, templates string, log *slog.Logger) *disks {
	return &disks{dir: dir, templates: templates, log: log, locks: map[string]*sync.Mutex{}, digests: map[string]treeMemo{}}
}

// known reports whether name is a template of the store.
func (d *disks) known(name string) bool {
	return image.ValidName(name) && image.Exists(d.templates, name)
}

// rootDisk returns the path of template name's root disk, building it if
// the cache has none for the template's current key. An unknown template
// is bad input wrapping image.ErrNotFound; a failed build is a backend
// failure.
func (d *disks) rootDisk(ctx context.Context, name string) (string, error) {
	digest, err := d.digest(name)
	if errors.Is(err, image.ErrNotFound) {
		return "", unknownImage(name, err)
	}
	if err != nil {
		return "", sandbox.Wrap(sandbox.BackendFailure, err, "template %s", name)
	}
	tdir := filepath.Join(d.dir, name)
	path := filepath.Join(tdir, diskKey(digest)+".ext4")
	lk := d.lock(name)
	lk.Lock()
	defer lk.Unlock()
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	root := image.RootFS(d.templates, name)
	if fi, err := os.Lstat(filepath.Dir(root)); err != nil || !fi.IsDir() {
		return "", sandbox.Wrap(sandbox.BackendFailure, vmimage.ErrRootNotDir, "template %s is not a directory", name)
	}
	if err := os.MkdirAll(tdir, 0o700); err != nil {
		return "", sandbox.Wrap(sandbox.BackendFailure, err, "root disk cache")
	}
	start := time.Now()
	if err := vmimage.BuildRootDiskOnce(ctx, root, path); err != nil {
		return "", sandbox.Wrap(sandbox.BackendFailure, err, "build the root disk of template %s", name)
	}
	d.log.Info("microvm: built the root disk of a template", "template", name, "digest", digest, "took", time.Since(start))
	d.removeOthers(tdir, filepath.Base(path))
	return path, nil
}

// rootFor is the root disk a sandbox of image boots, and what identifies
// it to a golden snapshot: the image's own disk by the image's digest, a
// template's by its key and the file's identity, so that a golden is never
// restored over another disk than the one its guest had mounted (a
// rebuilt disk is another file).
func (b *Backend) rootFor(ctx context.Context, p *probed, image string) (path, id string, err error) {
	if !b.usesTemplate(image) {
		return p.image.RootDisk(), "image " + p.image.Digest, nil
	}
	if path, err = b.disks.rootDisk(ctx, image); err != nil {
		return "", "", err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return "", "", sandbox.Wrap(sandbox.BackendFailure, err, "the root disk of template %s", image)
	}
	return path, fmt.Sprintf("template %s %s %d %d %d", image, filepath.Base(path), st.Dev, st.Ino, st.Mtim.Nano()), nil
}

// diskKey names a disk by what its bytes depend on.
func diskKey(digest string) string {
	h := sha256.Sum256([]byte(vmimage.RootDiskFormat + "\n" + digest))
	return hex.EncodeToString(h[:16])
}

func (d *disks) lock(name string) *sync.Mutex {
	d.mu.Lock()
	defer d.mu.Unlock()
	lk := d.locks[name]
	if lk == nil {
		lk = &sync.Mutex{}
		d.locks[name] = lk
	}
	return lk
}

// digest is the template's recorded digest, or its computed one, kept
// while the template directory stays the same.
func (d *disks) digest(name string) (string, error) {
	if !d.known(name) {
		return "", fmt.Errorf("%w: %s", image.ErrNotFound, name)
	}
	if _, err := os.Stat(filepath.Join(d.templates, name, image.DigestFile)); err == nil {
		return image.Digest(d.templates, name)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(d.templates, name), &st); err != nil {
		return "", fmt.Errorf("%w: %s", image.ErrNotFound, name)
	}
	d.mu.Lock()
	m, ok := d.digests[name]
	d.mu.Unlock()
	if ok && m.dev == st.Dev && m.ino == st.Ino && m.ctime == st.Ctim {
		return m.digest, nil
	}
	digest, err := image.Digest(d.templates, name)
	if err != nil {
		return "", err
	}
	d.mu.Lock()
	d.digests[name] = treeMemo{dev: st.Dev, ino: st.Ino, ctime: st.Ctim, digest: digest}
	d.mu.Unlock()
	return digest, nil
}

// removeOthers removes tdir's entries but keep: disks of the template's
// earlier keys. A VM still running one keeps its open descriptor.
func (d *disks) removeOthers(tdir, keep string) {
	ents, _ := os.ReadDir(tdir)
	for _, e := range ents {
		if e.Name() == keep || isLiveTemp(e.Name()) {
			continue
		}
		if err := os.Remove(filepath.Join(tdir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			d.log.Warn("microvm: remove a stale root disk", "path", filepath.Join(tdir, e.Name()), "err", err)
		}
	}
}

// reconcile removes the disks of templates the store no longer holds and
// the temporary files of builders that are gone.
func (d *disks) reconcile() error {
	ents, err := os.ReadDir(d.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		p := filepath.Join(d.dir, e.Name())
		if !e.IsDir() || !d.known(e.Name()) {
			errs = append(errs, os.RemoveAll(p))
			continue
		}
		files, _ := os.ReadDir(p)
		for _, f := range files {
			if strings.Contains(f.Name(), vmimage.TempInfix) && !isLiveTemp(f.Name()) {
				errs = append(errs, os.Remove(filepath.Join(p, f.Name())))
			}
		}
	}
	return errors.Join(errs...)
}

// isLiveTemp reports whether name is a temporary disk whose builder (the
// pid in its name, vmimage.TempInfix) is still running.
func isLiveTemp(name string) bool {
	_, rest, ok := strings.Cut(name, vmimage.TempInfix)
	if !ok {
		return false
	}
	pidStr, _, _ := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(pidStr)
	if err != nil || pid <= 0 {
		return false
	}
	err = syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
