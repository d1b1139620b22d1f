package vmimage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// File names inside an image directory.
const (
	VmlinuxFile   = "vmlinux"
	InitramfsFile = "initramfs.cpio"
	RootDiskFile  = "rootfs.ext4"
	ManifestFile  = "image.json"
)

// Options configure Build. Zero fields take the defaults named.
type Options struct {
	// Dir receives the image; it is created (0755: the unprivileged QEMU
	// user must read the files).
	Dir string
	// Guest is the static wovyr-guest binary. Required.
	Guest string
	// Busybox is a static busybox; zero means /bin/busybox (busybox-static).
	Busybox string
	// Kernel is a bzImage; zero means the newest /boot/vmlinuz-* whose
	// modules are installed (linux-image-amd64).
	Kernel string
	// ModulesDir is /lib/modules/<release> for Kernel; zero derives it.
	ModulesDir string
	// RootDir is the workload root filesystem template; zero means a
	// busybox root built by BusyboxRoot.
	RootDir string
}

// Image is a built microVM image.
type Image struct {
	Dir           string `json:"-"`
	KernelRelease string `json:"kernel_release"`
	// Digest covers the kernel, initramfs and root disk: part of the
	// backend's configuration hash, so a rebuilt image voids certification.
	Digest string `json:"digest"`
	// GuestDigest is the SHA-256 of the wovyr-guest binary the initramfs
	// carries, so that a node can tell an image built by another wovyr
	// (GuestDigest); empty in images built before it was recorded.
	GuestDigest string `json:"guest_digest,omitempty"`
}

// FileDigest is the hex SHA-256 of the file at path, as GuestDigest holds
// it for the guest binary.
func FileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Vmlinux, Initramfs and RootDisk are the image's file paths.
func (im *Image) Vmlinux() string   { return filepath.Join(im.Dir, VmlinuxFile) }
func (im *Image) Initramfs() string { return filepath.Join(im.Dir, InitramfsFile) }
func (im *Image) RootDisk() string  { return filepath.Join(im.Dir, RootDiskFile) }

// Build builds an image into o.Dir, step by named step.
func Build(ctx context.Context, o Options) (*Image, error) {
	if o.Dir == "" || o.Guest == "" {
		return nil, errors.New("vmimage: Options.Dir and Options.Guest are required")
	}
	if o.Busybox == "" {
		o.Busybox = "/bin/busybox"
	}
	im := &Image{Dir: o.Dir}
	if o.Kernel == "" {
		k, rel, err := FindKernel("/boot", "/lib/modules")
		if err != nil {
			return nil, err
		}
		o.Kernel, im.KernelRelease = k, rel
	}
	if o.ModulesDir == "" {
		if im.KernelRelease == "" {
			return nil, errors.New("vmimage: Options.ModulesDir is required with an explicit Kernel")
		}
		o.ModulesDir = filepath.Join("/lib/modules", im.KernelRelease)
	}
	if im.KernelRelease == "" {
		im.KernelRelease = filepath.Base(o.ModulesDir)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("vmimage: %w", err)
	}
	if err := os.Chmod(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("vmimage: %w", err)
	}
	steps := []struct {
		name string
		run  func() error
	}{
		{"kernel", func() error { return ExtractVmlinux(ctx, o.Kernel, im.Vmlinux()) }},
		{"initramfs", func() error {
			return WriteInitramfs(im.Initramfs(), InitramfsOptions{Guest: o.Guest, Busybox: o.Busybox, ModulesDir: o.ModulesDir})
		}},
		{"root disk", func() error { return buildRootDisk(ctx, o, im.RootDisk()) }},
		{"guest digest", func() (err error) { im.GuestDigest, err = FileDigest(o.Guest); return err }},
		{"manifest", func() error { return im.writeManifest() }},
	}
	for _, s := range steps {
		if err := s.run(); err != nil {
			return nil, fmt.Errorf("vmimage: build step %s: %w", s.name, err)
		}
	}
	return im, nil
}

func buildRootDisk(ctx context.Context, o Options, dst string) error {
	src := o.RootDir
	if src == "" {
		tmp, err := os.MkdirTemp(o.Dir, "wovyr-rootfs-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		if err := BusyboxRoot(ctx, o.Busybox, tmp); err != nil {
			return err
		}
		src = tmp
	}
	return BuildRootDisk(ctx, src, dst)
}

func (im *Image) writeManifest() error {
	h := sha256.New()
	for _, p := range []string{im.Vmlinux(), im.Initramfs(), im.RootDisk()} {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	im.Digest = hex.EncodeToString(h.Sum(nil))
	b, err := json.MarshalIndent(im, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(im.Dir, ManifestFile), append(b, '\n'), 0o644)
}

// Load opens a built image, checking that its files are there.
func Load(dir string) (*Image, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("vmimage: no image in %s (run wovyr image build microvm): %w", dir, err)
	}
	im := &Image{Dir: dir}
	if err := json.Unmarshal(b, im); err != nil {
		return nil, fmt.Errorf("vmimage: manifest %s: %w", dir, err)
	}
	for _, p := range []string{im.Vmlinux(), im.Initramfs(), im.RootDisk()} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("vmimage: image %s is incomplete: %w", dir, err)
		}
	}
	return im, nil
}
