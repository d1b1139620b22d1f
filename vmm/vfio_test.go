package vmm

import (
	"strings"
	"testing"
)

// TestArgsVFIO: passed-through devices give the microvm a PCIe host bridge
// and one vfio-pci function each, by host address, and the VMM an
// RLIMIT_MEMLOCK of the guest RAM plus 64 MiB; only under KVM, never with
// snapshot RAM, never an address that is not one. A spec without devices
// has neither PCIe nor a memlock limit.
func TestArgsVFIO(t *testing.T) {
	q := &QEMU{}
	s := &Spec{ID: "x", Kernel: "/k", Accel: KVM, UID: 1, Memory: 512 << 20, Limits: Limits{Unlimited: true},
		VFIO: []string{"0000:01:00.0", "0000:41:00.0"}}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(q.Args(s), " ")
	for _, want := range []string{"-machine microvm,x-option-roms=off,pcie=on ", "-device vfio-pci,host=0000:01:00.0 -device vfio-pci,host=0000:41:00.0"} {
		if !strings.Contains(joined, want) {
			t.Errorf("args lack %q: %s", want, joined)
		}
	}
	if got, want := strings.Join(rlimitArgs(s), " "), "--nofile=256 --fsize=1048576 --memlock=603979776 --"; got != want {
		t.Errorf("rlimits %q, want %q", got, want)
	}
	for _, c := range []struct {
		mut  func(*Spec)
		want string
	}{
		{func(s *Spec) { s.Accel = TCG }, "vmm: VFIO passthrough needs KVM, not tcg"},
		{func(s *Spec) { s.VFIO = []string{"01:00.0"} }, `vmm: VFIO device "01:00.0" must be a PCI address like 0000:01:00.0`},
		{func(s *Spec) { s.VFIO = []string{"0000:01:00.0,x-foo=on"} }, `vmm: VFIO device "0000:01:00.0,x-foo=on" must be a PCI address like 0000:01:00.0`},
	} {
		bad := *s
		c.mut(&bad)
		if err := bad.Validate(); err == nil || err.Error() != c.want {
			t.Errorf("Validate: %v, want %s", err, c.want)
		}
	}
	s.VFIO = nil
	joined = strings.Join(q.Args(s), " ")
	if strings.Contains(joined, "pcie") || strings.Contains(joined, "vfio") || strings.Contains(strings.Join(rlimitArgs(s), " "), "memlock") {
		t.Errorf("a spec without devices: %s %v", joined, rlimitArgs(s))
	}
}
