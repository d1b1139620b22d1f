package native

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/egress/egresstest"
	"github.com/wovyr/wovyr/egress/netns"
)

// egressBackend is a native backend with an egress service on a rig of the
// test's own (the daemon's service stand-in: the battery never uses it for
// the egress rows, but Probe runs through it).
func egressBackend(t *testing.T, tag string) *Backend {
	t.Helper()
	ctx := context.Background()
	plain := newBackend(t)
	rig, err := egresstest.New(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rig.Close(); err != nil {
			t.Error(err)
		}
	})
	svc, err := egress.NewService(ctx, rig.Config(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := svc.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	b, err := New(Config{ScratchDir: plain.scratch, Network: svc})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEgressBattery runs native's egress rows through battery.Run: every
// row 71–84 (82 not applicable) holds through the real backend and a real
// service on an isolated rig, every positive control flags, and nothing of
// the battery's rig is left behind.
func TestEgressBattery(t *testing.T) {
	if testing.Short() {
		t.Skip("four truth-table runs take tens of seconds")
	}
	ctx := context.Background()
	b := egressBackend(t, "nbs")
	probe := filepath.Join(t.TempDir(), "egressprobe")
	if err := egresstest.BuildProbe(ctx, probe); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(probe)
	if err != nil {
		t.Fatal(err)
	}
	full := EgressSuite(b, "/nonexistent-guest", bin)
	if why := full.NotApplicable[82]; !strings.Contains(why, "abstract") {
		t.Errorf("row 82: %q", why)
	}
	s := battery.Suite{Target: full.Target, NotApplicable: map[int]string{}}
	for _, p := range full.Probes {
		if p.ID >= 71 && p.ID <= 84 {
			s.Probes = append(s.Probes, p)
		}
	}
	rec, err := battery.Run(ctx, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	var judged []int
	for _, o := range rec.Outcomes {
		if o.ID < 71 || o.ID > 84 || !o.Applies || !slices.ContainsFunc(s.Probes, func(p battery.Probe) bool { return p.ID == o.ID }) {
			continue
		}
		judged = append(judged, o.ID)
		t.Logf("row %d: %s | control: %.300s", o.ID, o.Observed, o.ControlObserved)
		if !o.Pass {
			t.Errorf("row %d failed: %s: %s", o.ID, o.Tried, o.Observed)
		}
		if !o.ControlFlagged {
			t.Errorf("row %d: the control was not flagged: %s", o.ID, o.ControlObserved)
		}
		if strings.Contains(o.ControlObserved, "] 0 of the row's") || !strings.Contains(o.ControlObserved, "of the row's checks wrong") {
			// The control must have run the table and broken this row's
			// own checks, not failed to run or broken only others.
			t.Errorf("row %d: the control flagged without breaking the row: %s", o.ID, o.ControlObserved)
		}
	}
	if want := []int{71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 83, 84}; !slices.Equal(judged, want) {
		t.Errorf("rows judged %v, want %v", judged, want)
	}
	if left, err := netns.List("wovyr-" + egressTag + "-"); err != nil || len(left) > 0 {
		t.Errorf("the battery's rig left %v (%v)", left, err)
	}
}

// TestEgressSuiteWithoutNetwork: without an egress service every egress
// row still reduces to row 70, and the config hash tells the two apart.
func TestEgressSuiteWithoutNetwork(t *testing.T) {
	plain := newBackend(t)
	s := EgressSuite(plain, "/nonexistent-guest", []byte("unused"))
	for id := 71; id <= 84; id++ {
		if !strings.Contains(s.NotApplicable[id], "row 70") {
			t.Errorf("row %d without a network: %q", id, s.NotApplicable[id])
		}
	}
	for _, p := range s.Probes {
		if p.ID > 70 && p.ID <= 84 {
			t.Errorf("row %d probed without a network", p.ID)
		}
	}
	if _, err := plain.Weakened(EgressOpen); err == nil {
		t.Error("an egress control without an egress service")
	}
	withNet := egressBackend(t, "nbh")
	if plain.configHash() == withNet.configHash() {
		t.Fatalf("config hash %s with and without an egress service", plain.configHash())
	}
}
