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
		t.Run(name, func(t *testing.T) { assertRow(t, b, 93) })
	}
}

// TestSelfTraceRow: issue #25 item 1's battery row 94 — a self-tracing
// job keeps exit 7 and its output, without files (the sandbox's first
// process in a one-shot sandbox) and with one (under the agent); its
// control (TraceStopAsExit, the agent before the fix) must flag. The
// container backend failed its no-files case (class timeout, stdout
// "traceme errno=0\n"): crun, the init's parent, was its tracer and never
// resumed it; a one-shot job now runs under wovyr-guest's "job".
func TestSelfTraceRow(t *testing.T) {
	for name, b := range newBackends(t) {
		t.Run(name, func(t *testing.T) { assertRow(t, b, 94) })
	}
}

// assertRow runs battery row id alone on b and wants it to pass with a
// flagged control.
func assertRow(t *testing.T, b *Backend, id int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := Suite(b, "busybox")
	s.Probes = slices.DeleteFunc(s.Probes, func(p battery.Probe) bool { return p.ID != id })
	if len(s.Probes) != 1 {
		t.Fatalf("row %d has %d probes", id, len(s.Probes))
	}
	rec, err := battery.Run(ctx, s, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range rec.Outcomes {
		if o.ID != id {
			continue
		}
		if !o.Pass || !o.ControlFlagged {
			t.Fatalf("#%d: pass %v (%s), control flagged %v (%s)", id, o.Pass, o.Observed, o.ControlFlagged, o.ControlObserved)
		}
		return
	}
	t.Fatalf("no outcome for row %d", id)
}
