package vmimage_test

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/internal/vmtest"
	"github.com/wovyr/wovyr/vmimage"
)

var env vmtest.Builder

func TestMain(m *testing.M) {
	code := m.Run()
	env.Cleanup()
	os.Exit(code)
}

// TestVmlinuxHasPVHEntry: the extracted kernel is an ELF with the Xen
// PHYS32_ENTRY note (type 18) that QEMU needs for a PVH boot.
func TestVmlinuxHasPVHEntry(t *testing.T) {
	im := env.Get(t).Image
	f, err := elf.Open(im.Vmlinux())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	found := false
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			t.Fatal(err)
		}
		for len(b) >= 12 {
			nsz, dsz, typ := le32(b), le32(b[4:]), le32(b[8:])
			name := string(b[12 : 12+nsz])
			if strings.HasPrefix(name, "Xen") && typ == 18 {
				found = true
			}
			b = b[12+align4(nsz)+align4(dsz):]
		}
	}
	if !found {
		t.Fatal("no XEN_ELFNOTE_PHYS32_ENTRY note: QEMU cannot PVH-boot this kernel")
	}
}

func le32(b []byte) int { return int(b[0]) | int(b[1])<<8 | int(b[2])<<16 | int(b[3])<<24 }
func align4(n int) int  { return (n + 3) &^ 3 }

func TestInitramfsContents(t *testing.T) {
	im := env.Get(t).Image
	f, err := os.Open(im.Initramfs())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("cpio", "-itv", "--quiet")
	cmd.Stdin = f
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("cpio (apt cpio) cannot list it: %v", err)
	}
	listing := string(out)
	for _, want := range []string{" init\n", " bin/busybox\n", " lib/modules/ext4.ko\n", " lib/modules/virtio_blk.ko\n", " lib/modules/load.order\n"} {
		if !strings.Contains(listing, want) {
			t.Errorf("initramfs lacks%s", want)
		}
	}
	if !strings.Contains(listing, "crw-------") || !strings.Contains(listing, "5,   1") && !strings.Contains(listing, "5, 1") {
		t.Errorf("no /dev/console node:\n%s", listing)
	}
}

func TestResolveModulesOrdersDependenciesFirst(t *testing.T) {
	dir := t.TempDir()
	dep := "kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko kernel/fs/mbcache.ko kernel/fs/jbd2/jbd2.ko\n" +
		"kernel/fs/jbd2/jbd2.ko:\nkernel/fs/mbcache.ko:\nkernel/lib/crc16.ko:\n" +
		"kernel/drivers/virtio/virtio_mmio.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko\n" +
		"kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko\nkernel/drivers/virtio/virtio_ring.ko:\n"
	os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(dep), 0o644)
	order, err := vmimage.ResolveModules(dir, []string{"virtio_mmio", "ext4"})
	if err != nil {
		t.Fatal(err)
	}
	idx := func(s string) int {
		return slices.IndexFunc(order, func(o string) bool { return strings.HasSuffix(o, "/"+s+".ko") })
	}
	if idx("virtio_ring") > idx("virtio") || idx("virtio") > idx("virtio_mmio") || idx("jbd2") > idx("ext4") || idx("crc16") > idx("ext4") || len(order) != 7 {
		t.Fatalf("bad order %v", order)
	}
	if _, err := vmimage.ResolveModules(dir, []string{"nosuch"}); err == nil {
		t.Fatal("a missing module was not reported")
	}
}

func TestExtractRefusesNonKernel(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bz")
	os.WriteFile(p, make([]byte, 8192), 0o644)
	if err := vmimage.ExtractVmlinux(context.Background(), p, p+".out"); err == nil {
		t.Fatal("a zero file was accepted as a bzImage")
	}
	if _, err := os.Stat(p + ".out"); !os.IsNotExist(err) {
		t.Fatal("output written for a bad kernel")
	}
}

func TestLoadRefusesIncompleteImage(t *testing.T) {
	im := env.Get(t).Image
	if _, err := vmimage.Load(im.Dir); err != nil {
		t.Fatal(err)
	}
	if _, err := vmimage.Load(t.TempDir()); err == nil {
		t.Fatal("an empty directory loaded as an image")
	}
}

// Issue #25: os.Chmod(tmp, 0o1777) set 0777 (Go's FileMode spells the
// sticky bit os.ModeSticky), and the workspace was /work.
func TestBusyboxRootTmpIsStickyAndWorkspaceIsSandboxWorkspace(t *testing.T) {
	dir := t.TempDir()
	if err := vmimage.BusyboxRoot(context.Background(), "/bin/busybox", dir); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, "tmp"))
	if err != nil || st.Mode()&os.ModeSticky == 0 || st.Mode().Perm() != 0o777 {
		t.Fatalf("/tmp mode %v %v, want drwxrwxrwt", st.Mode(), err)
	}
	if st, err := os.Stat(filepath.Join(dir, "workspace")); err != nil || !st.IsDir() {
		t.Fatalf("/workspace: %v", err)
	}
}
