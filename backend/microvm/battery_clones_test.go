package microvm

import (
	"context"
	"slices"
	"testing"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/cert"
)

// TestSnapshotBattery runs BATTERY 85, 87 and 88 on clones through
// battery.Run: each passes on the target, and its control — a golden
// captured after a tenant ran (85), clones never thawed (87, 88) — is
// flagged.
func TestSnapshotBattery(t *testing.T) {
	for _, o := range runRows(t, Suite(backend(t), battery.Suite{}), 85, 87, 88) {
		t.Logf("row %d: %s | control: %s", o.ID, o.Observed, o.ControlObserved)
	}
}

// runRows runs rows of full through battery.Run and fails t for each
// that did not pass or whose control was not flagged; it returns their
// outcomes.
func runRows(t *testing.T, full battery.Suite, rows ...int) []cert.Outcome {
	t.Helper()
	s := battery.Suite{Target: full.Target, NotApplicable: map[int]string{}, Teardown: full.Teardown}
	for _, p := range full.Probes {
		if slices.Contains(rows, p.ID) {
			s.Probes = append(s.Probes, p)
		}
	}
	rec, err := battery.Run(context.Background(), s, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []cert.Outcome
	for _, o := range rec.Outcomes {
		if !slices.Contains(rows, o.ID) {
			continue
		}
		out = append(out, o)
		if !o.Pass {
			t.Errorf("row %d failed: %s: %s", o.ID, o.Tried, o.Observed)
		}
		if !o.ControlFlagged {
			t.Errorf("row %d: its control was not flagged: %s", o.ID, o.ControlObserved)
		}
	}
	if len(out) != len(rows) {
		t.Fatalf("%d rows judged, want %d", len(out), len(rows))
	}
	return out
}
