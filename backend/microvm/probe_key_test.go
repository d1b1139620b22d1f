package microvm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/vmimage"
	"github.com/wovyr/wovyr/vmm"
)

// TestAdoptTakesTheProbedAccel: a second backend of the same configuration
// adopts the shared backend's probe answer without booting anything, and
// boots a one-shot VM on it.
func TestAdoptTakesTheProbedAccel(t *testing.T) {
	b := backend(t)
	capa := b.Probe(context.Background())
	nb, err := New(b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if nb.ProbeKey() != b.ProbeKey() || nb.ProbeKey() == "" {
		t.Fatalf("keys %q and %q; want one non-empty key for one configuration", nb.ProbeKey(), b.ProbeKey())
	}
	if err := nb.Adopt(context.Background(), capa); err != nil {
		t.Fatal(err)
	}
	if got := nb.Probe(context.Background()); got.ConfigHash != capa.ConfigHash || got.Accel != capa.Accel {
		t.Fatalf("adopted %+v, probed %+v", got, capa)
	}
	s, err := nb.Prepare(context.Background(), sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy(context.Background())
	res, err := s.Run(context.Background(), inv("/bin/echo", "adopted"))
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "adopted\n" {
		t.Fatalf("run on the adopted backend: %+v, %v", res, err)
	}

	for name, mod := range map[string]func(*sandbox.Capability){
		"another config hash":   func(c *sandbox.Capability) { c.ConfigHash = "0000" },
		"another QEMU":          func(c *sandbox.Capability) { c.Version = "qemu 9.9.9; guest " + b.probe.image.KernelRelease },
		"another guest kernel":  func(c *sandbox.Capability) { c.Version = "qemu 7.2; guest 0.0.1" },
		"another accelerator":   func(c *sandbox.Capability) { c.Accel = "kvm-other" },
		"no guest in a version": func(c *sandbox.Capability) { c.Version = "qemu" },
	} {
		other := capa
		mod(&other)
		fresh, _ := New(b.cfg)
		if err := fresh.Adopt(context.Background(), other); err == nil {
			t.Errorf("%s: adopted", name)
		}
	}
}

// TestProbeKeyFollowsTheImage: rebuilding the image (its manifest or disk
// rewritten) or changing configuration changes the key; a fake VMM has no
// key at all.
func TestProbeKeyFollowsTheImage(t *testing.T) {
	dir := t.TempDir()
	im := &vmimage.Image{Dir: dir, KernelRelease: "6.1.0-test"}
	for _, f := range []string{im.Vmlinux(), im.Initramfs(), im.RootDisk()} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	manifest := func() {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, vmimage.ManifestFile+".tmp"), []byte(`{"kernel_release":"6.1.0-test","digest":"d"}`), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, vmimage.ManifestFile+".tmp"), filepath.Join(dir, vmimage.ManifestFile)); err != nil {
			t.Fatal(err)
		}
	}
	manifest()
	b, err := New(Config{StateDir: t.TempDir(), ImageDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	k0 := b.ProbeKey()
	at := time.Now().Add(time.Hour)
	if err := os.Chtimes(im.RootDisk(), at, at); err != nil {
		t.Fatal(err)
	}
	k1 := b.ProbeKey()
	if k1 == k0 {
		t.Error("a rewritten root disk kept the key")
	}
	manifest()
	if b.ProbeKey() == k1 {
		t.Error("a rewritten manifest kept the key")
	}
	vcpus, _ := New(Config{StateDir: b.cfg.StateDir, ImageDir: dir, VCPUs: 2})
	if vcpus.ProbeKey() == b.ProbeKey() {
		t.Error("another vCPU count kept the key")
	}
	fake, err := New(Config{StateDir: b.cfg.StateDir, ImageDir: dir, VMM: fakeVMM{}})
	if err != nil {
		t.Fatal(err)
	}
	if fake.ProbeKey() != "" {
		t.Error("a fake VMM's probe would be stored")
	}
}

// fakeVMM is a VMM that is not QEMU; its methods are never called.
type fakeVMM struct{ vmm.VMM }

// TestImageOfAnotherGuestIsUnavailable: an image whose initramfs carries a
// guest other than the node's (built by another wovyr, or before guests
// were recorded) is refused at the probe with the command that fixes it,
// not judged by the battery.
func TestImageOfAnotherGuestIsUnavailable(t *testing.T) {
	dir := t.TempDir()
	guest := filepath.Join(t.TempDir(), "wovyr-guest")
	if err := os.WriteFile(guest, []byte("this node's guest"), 0o755); err != nil {
		t.Fatal(err)
	}
	want, err := vmimage.FileDigest(guest)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{StateDir: t.TempDir(), ImageDir: dir, Guest: guest})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		digest string
		ok     bool
	}{{want, true}, {"", false}, {strings.Repeat("0", 64), false}} {
		err := b.checkGuest(&vmimage.Image{Dir: dir, GuestDigest: tc.digest})
		if tc.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "rebuild it with `wovyr image build microvm`")) {
			t.Errorf("guest digest %q: %v", tc.digest, err)
		}
	}
	if err := (&Backend{cfg: Config{}}).checkGuest(&vmimage.Image{}); err != nil {
		t.Errorf("no Config.Guest: %v, want no check", err)
	}
	k0 := b.ProbeKey()
	if err := os.WriteFile(guest, []byte("a rebuilt guest"), 0o755); err != nil {
		t.Fatal(err)
	}
	if b.ProbeKey() == k0 {
		t.Error("a rebuilt guest kept the probe key")
	}
}

// TestBuiltImageRecordsItsGuest: a built image names the guest it carries,
// and a backend given that guest accepts it (the shared test backend boots
// it).
func TestBuiltImageRecordsItsGuest(t *testing.T) {
	e := env.Get(t)
	want, err := vmimage.FileDigest(e.Guest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := vmimage.Load(e.Image.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if im.GuestDigest != want {
		t.Fatalf("image records guest %q, the guest is %q", im.GuestDigest, want)
	}
	b, err := New(Config{StateDir: t.TempDir(), ImageDir: e.Image.Dir, Guest: e.Guest})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.checkGuest(im); err != nil {
		t.Fatal(err)
	}
}
