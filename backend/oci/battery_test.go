package oci

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/wovyr/wovyr/battery"
)

// TestBattery runs the certification battery: every applicable row has a
// probe that holds and a positive control that flags (on gvisor, rows its
// Sentry keeps safe whatever the spec says are controlled on the container
// backend), so both backends certify.
func TestBattery(t *testing.T) {
	for name, b := range newBackends(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			s := Suite(b, "busybox")
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
				case !o.Applies:
				case !impl[o.ID]:
					t.Errorf("#%d %s: applies but has no probe", o.ID, o.Name)
				case !o.Pass:
					t.Errorf("#%d %s: FAIL: %s", o.ID, o.Name, o.Observed)
				case !o.ControlFlagged:
					t.Errorf("#%d %s: control did not flag: %s", o.ID, o.Name, o.ControlObserved)
				}
			}
			if !rec.Passed {
				t.Fatalf("%s is not certified: %v", name, rec.Failed())
			}
		})
	}
}
