package microvm

import (
	"context"
	"slices"
	"testing"

	"github.com/wovyr/wovyr/battery"
)

// TestSnapshotBattery runs BATTERY 85, 87 and 88 on clones through
// battery.Run: each passes on the target, and its control — a golden
// captured after a tenant ran (85), clones never thawed (87, 88) — is
// flagged.
func TestSnapshotBattery(t *testing.T) {
	rows := []int{85, 87, 88}
	full := Suite(backend(t), battery.Suite{})
	s := battery.Suite{Target: full.Target, NotApplicable: map[int]string{}}
	for _, p := range full.Probes {
		if slices.Contains(rows, p.ID) {
			s.Probes = append(s.Probes, p)
		}
	}
	rec, err := battery.Run(context.Background(), s, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, o := range rec.Outcomes {
		if !slices.Contains(rows, o.ID) {
			continue
		}
		seen++
		if !o.Pass {
			t.Errorf("row %d failed: %s: %s", o.ID, o.Tried, o.Observed)
		}
		if !o.ControlFlagged {
			t.Errorf("row %d: its control was not flagged: %s", o.ID, o.ControlObserved)
		}
		t.Logf("row %d: %s | control: %s", o.ID, o.Observed, o.ControlObserved)
	}
	if seen != len(rows) {
		t.Errorf("%d rows judged, want %d", seen, len(rows))
	}
}
