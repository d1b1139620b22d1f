package microvm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/wovyr/wovyr/probecache"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/vmimage"
	"github.com/wovyr/wovyr/vmm"
)

// ProbeKey implements sandbox.ProbeCacher for QEMU; another VMM (a test's
// fake) is probed every time. The probe's answer depends on the QEMU
// binary (its version is that file's), the image's files, whether /dev/kvm
// opens, the account QEMU runs as and the configuration.
func (b *Backend) ProbeKey() string {
	q, ok := b.cfg.VMM.(*vmm.QEMU)
	if !ok {
		return ""
	}
	k := probecache.NewKey(b.Name()).Command(q.BinaryName()).Command("prlimit").File("/dev/kvm")
	kvm, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	k.Add("kvm-opens", err == nil)
	if err == nil {
		kvm.Close()
	}
	k.File(filepath.Join(b.cfg.ImageDir, vmimage.ManifestFile))
	if im, err := vmimage.Load(b.cfg.ImageDir); err == nil {
		k.File(im.Vmlinux()).File(im.Initramfs()).File(im.RootDisk())
	}
	if b.cfg.SharedUser {
		k.File("/etc/passwd").File("/etc/group")
	}
	if b.cfg.Guest != "" {
		k.File(b.cfg.Guest)
	}
	c := b.cfg
	return k.Add(c.StateDir, c.ImageDir, c.Accel, c.KVMProbeTimeout, c.BootTimeout, c.SharedUser, c.User,
		c.UIDBase, c.UIDCount, c.Warm, c.VCPUs, c.GuestOverhead, c.ExtraCmdline, c.Network != nil, c.weak).String()
}

// Adopt implements sandbox.ProbeCacher: the stored accelerator, with the
// image loaded again, must give the stored configuration hash. An image
// rebuilt since, or another QEMU, does not.
func (b *Backend) Adopt(ctx context.Context, capa sandbox.Capability) error {
	version, guest, ok := strings.Cut(capa.Version, "; guest ")
	if !ok {
		return fmt.Errorf("microvm: stored version %q has no guest kernel", capa.Version)
	}
	im, err := vmimage.Load(b.cfg.ImageDir)
	if err != nil {
		return err
	}
	// The guest check (checkGuest) is not repeated: the key covers the
	// guest's file and the image's, so an answer stored as available was
	// for this very pair.
	if im.KernelRelease != guest {
		return fmt.Errorf("microvm: image has guest kernel %s, the stored probe %s", im.KernelRelease, guest)
	}
	p := &probed{image: im, accel: vmm.Accel(capa.Accel), cap: capa}
	if b.cfg.SharedUser {
		if p.uid, p.gid, err = lookupUser(b.cfg.User); err != nil {
			return err
		}
	}
	if h := b.configHash(version, p); h != capa.ConfigHash {
		return fmt.Errorf("microvm: stored probe is for config %s, this is %s", capa.ConfigHash, h)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.probe == nil {
		b.probe = p
	}
	return nil
}
