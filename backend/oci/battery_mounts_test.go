package oci

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/wovyr/wovyr/battery"
)

// TestMountTableHidesSandboxLayout pins issue #25 item 8: a container's
// /proc/self/mountinfo showed its root overlay's layers by host path
// (StateDir/run/oci/sb/wovyr-c-<id>/{lower,upper}). Row 93 must hold on
// both backends, and its control (HostPathLayers, the old mount) must flag.
func TestMountTableHidesSandboxLayout(t *testing.T) {
	for name, b := range newBackends(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			s := Suite(b, "busybox")
			s.Probes = slices.DeleteFunc(s.Probes, func(p battery.Probe) bool { return p.ID != 93 })
			if len(s.Probes) != 1 {
				t.Fatalf("row 93 has %d probes", len(s.Probes))
			}
			rec, err := battery.Run(ctx, s, os.Stderr)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range rec.Outcomes {
				if o.ID != 93 {
					continue
				}
				if !o.Pass || !o.ControlFlagged {
					t.Fatalf("#93: pass %v (%s), control flagged %v (%s)", o.Pass, o.Observed, o.ControlFlagged, o.ControlObserved)
				}
				return
			}
			t.Fatal("no outcome for row 93")
		})
	}
}
