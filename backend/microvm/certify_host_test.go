package microvm

import (
	"os"
	"strings"
	"testing"
)

// TestClassifyFDsAllowsOneTap: a VMM with a NIC may hold its one tap
// descriptor (row 4 must not fail every egress-enabled VM), a second one is
// flagged, and without a NIC any /dev/net/tun descriptor is.
func TestClassifyFDsAllowsOneTap(t *testing.T) {
	var taps []*os.File
	for range 2 {
		f, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0)
		if err != nil {
			t.Skipf("no /dev/net/tun on this host: %v", err)
		}
		taps = append(taps, f)
	}
	defer func() {
		for _, f := range taps {
			f.Close()
		}
	}()
	count := func(nic bool) int {
		n := 0
		for _, b := range classifyFDs("/proc/self", nil, nic) {
			if strings.HasSuffix(b, "→ /dev/net/tun") {
				n++
			}
		}
		return n
	}
	if n := count(true); n != 1 {
		t.Errorf("with a NIC: %d tun descriptors flagged, want 1 (the second)", n)
	}
	if n := count(false); n != 2 {
		t.Errorf("without a NIC: %d tun descriptors flagged, want 2", n)
	}
}
