package oci

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/wovyr/wovyr/battery"
)

// TestBatteryFS runs only the filesystem, runtime and host-posture rows
// (fsProbes): each must hold, and each control must flag.
func TestBatteryFS(t *testing.T) {
	for name, b := range newBackends(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			s := Suite(b, "busybox")
			s.Probes, _ = fsProbes(b)
			rec, err := battery.Run(ctx, s, os.Stderr)
			if err != nil {
				t.Fatal(err)
			}
			impl := map[int]bool{}
			for _, p := range s.Probes {
				impl[p.ID] = true
			}
			for _, o := range rec.Outcomes {
				switch {
				case !impl[o.ID]:
				case !o.Pass:
					t.Errorf("#%d %s: FAIL: %s", o.ID, o.Name, o.Observed)
				case !o.ControlFlagged:
					t.Errorf("#%d %s: control did not flag: %s", o.ID, o.Name, o.ControlObserved)
				default:
					t.Logf("#%d %s: %s | control %s", o.ID, o.Name, o.Observed, o.ControlObserved)
				}
			}
		})
	}
}
