package vmm_test

import (
	"net"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/vmm"
)

// TestArgsNIC: a NIC is a tap by descriptor only (the fd after the ports),
// a virtio-net device on the microvm's mmio bus, and nothing else; a spec
// without one has no network device at all.
func TestArgsNIC(t *testing.T) {
	tap, err := os.Open(os.DevNull) // Args only numbers descriptors
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	q := &vmm.QEMU{}
	s := &vmm.Spec{ID: "x", Kernel: "/k", Initrd: "/i", Accel: vmm.TCG, UID: 1, Limits: vmm.Limits{Unlimited: true},
		Disks: []vmm.Disk{{Path: "/r", Serial: "wovyr-root", ReadOnly: true}, {Path: "/s", Serial: "wovyr-scratch"}},
		Ports: []vmm.Port{{Name: "wovyr.ctl"}},
		NIC:   &vmm.NIC{Tap: tap, MAC: net.HardwareAddr{0x02, 0, 0, 0, 0, 0x2a}}}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	a := q.Args(s)
	// kernel 3, initrd 4, root 5, scratch 6+7, port 8, tap 9.
	joined := strings.Join(a, " ")
	if !strings.Contains(joined, "-netdev tap,id=net0,fd=9 -device virtio-net-device,netdev=net0,mac=02:00:00:00:00:2a") {
		t.Errorf("args: %s", joined)
	}
	for _, bad := range []string{"script", "ifname", "helper", "vhost", "br="} {
		if strings.Contains(joined, bad) {
			t.Errorf("args carry %q: %s", bad, joined)
		}
	}
	for _, mac := range []net.HardwareAddr{{0x01, 0, 0, 0, 0, 1}, {0x00, 0x16, 0x3e, 0, 0, 1}, {2, 0, 0}} {
		s.NIC.MAC = mac
		if err := s.Validate(); err == nil {
			t.Errorf("MAC %s accepted", mac)
		}
	}
	s.NIC = &vmm.NIC{MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}}
	if err := s.Validate(); err == nil {
		t.Error("a NIC without a tap accepted")
	}
	s.NIC = nil
	if a := q.Args(s); slices.Contains(a, "-netdev") || strings.Contains(strings.Join(a, " "), "virtio-net") {
		t.Errorf("a spec without a NIC has a network device: %v", a)
	}
}
