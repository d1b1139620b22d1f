package oci

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestHostPrivilegedIsFlagged: the kernel-surface probes' control
// configuration is reported by the spec lint (caps, seccomp, user
// namespace, NNP; runsc's --net-raw/--iouring) and carries its own
// ConfigHash, so it can never pass for, or carry, the real backend.
func TestHostPrivilegedIsFlagged(t *testing.T) {
	s := testSpec(t)
	weakenSpec(s, HostPrivileged)
	if bad := LintSpec(s, nil); len(bad) < 4 {
		t.Errorf("lint found %d issues in the host-privileged spec, want >= 4: %v", len(bad), bad)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for name, b := range newBackends(t) {
		real := b.Probe(ctx).ConfigHash // picks the driver the copy inherits, as battery.Run does
		w, err := b.Weakened(HostPrivileged)
		if err != nil {
			t.Fatal(err)
		}
		wb := w.(*Backend)
		if b.gvisor {
			if !slices.Contains(wb.driver.flags, "--iouring") || slices.Contains(b.driver.flags, "--iouring") {
				t.Errorf("runsc flags: weakened %v, real %v", wb.driver.flags, b.driver.flags)
			}
			if bad := LintSpec(testSpec(t), wb.driver.flags); len(bad) != 2 {
				t.Errorf("lint of the weakened runsc flags: %v", bad)
			}
		}
		// (Probe re-picks the copy's driver: check its flags first.)
		if got, want := wb.Probe(ctx).ConfigHash, real; got == want || got == "" {
			t.Errorf("%s: weakened ConfigHash %q, real %q", name, got, want)
		}
	}
}
