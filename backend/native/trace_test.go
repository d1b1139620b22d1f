package native

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/wovyr/wovyr/battery"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/sandbox/sandboxtest"
)

// TestSelfTracingJob is issue #25 item 1's reproducer on native: a leader
// that calls PTRACE_TRACEME and then takes a signal must keep its exit code
// (7) and its output.
func TestSelfTracingJob(t *testing.T) {
	b := newBackend(t)
	data := sandboxtest.Traceme(t)
	inv := &sandbox.Invocation{Tenant: "acme", Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/sh", "-c", "chmod +x tool && exec ./tool"},
		Env: []string{"PATH=/usr/bin:/bin"}, Files: []sandbox.File{{Path: "tool", Data: data, Mode: 0o755}}}}
	inv.Limits.Wall = 30 * time.Second
	inv.Policy.Trust = sandbox.Trusted
	res := run(t, b, inv)
	if want := "traceme errno=0\ngot SIGUSR1\n"; res.Class != sandbox.OK || res.ExitCode != 7 || string(res.Stdout) != want {
		t.Fatalf("class %q (%s), exit %d, stdout %q, stderr %q; want exit 7 and %q", res.Class, res.Error, res.ExitCode, res.Stdout, res.Stderr, want)
	}
}

// TestSelfTraceRow: battery row 94 passes on native and its control (the
// wait that takes a ptrace-stop for the exit) flags.
func TestSelfTraceRow(t *testing.T) {
	s := Suite(newBackend(t), buildGuest(t))
	s.Probes = slices.DeleteFunc(s.Probes, func(p battery.Probe) bool { return p.ID != 94 })
	rec, err := battery.Run(context.Background(), s, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range rec.Outcomes {
		if o.ID == 94 {
			if !o.Pass || !o.ControlFlagged {
				t.Fatalf("#94: pass %v (%s), control flagged %v (%s)", o.Pass, o.Observed, o.ControlFlagged, o.ControlObserved)
			}
			return
		}
	}
	t.Fatal("no outcome for row 94")
}
