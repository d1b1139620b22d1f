package plugin

import (
	"context"
	"testing"
)

// TestBattery runs the plugin host's battery rows: every probe holds its
// secure outcome on the host as configured, and every positive control
// (the same probe with the row's one property switched off) flags.
func TestBattery(t *testing.T) {
	outs, err := Battery(context.Background(), Config{Dir: t.TempDir()},
		BatteryComponents{Calc: component(t, "calc"), Rand: component(t, "rand"), Tally: component(t, "tally")})
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 7 {
		t.Fatalf("%d rows, want 7 (99-105)", len(outs))
	}
	for i, o := range outs {
		if o.ID != 99+i || o.Name == "" {
			t.Errorf("row %d named %q at %d", o.ID, o.Name, i)
		}
		if !o.Pass || !o.ControlFlagged {
			t.Errorf("row %d %s: pass %v (%s), control flagged %v (%s)", o.ID, o.Name, o.Pass, o.Observed, o.ControlFlagged, o.ControlObserved)
		}
		t.Logf("%d %s\n\ttried: %s\n\tobserved: %s\n\tcontrol: %s", o.ID, o.Name, o.Tried, o.Observed, o.ControlObserved)
	}
}
