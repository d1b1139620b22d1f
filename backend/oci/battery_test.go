package oci

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/battery"
)

// batteryBackends are the configurations the battery must certify: the
// container backend on each runtime it can be configured with (crun, runc)
// and gvisor on runsc. A regression on any of them fails the test.
func batteryBackends(t *testing.T) map[string]*Backend {
	t.Helper()
	out := map[string]*Backend{}
	for name, mk := range map[string]func() (*Backend, error){
		"container-crun": func() (*Backend, error) { c := testConfig(t); c.Runtime = "crun"; return NewContainer(c) },
		"container-runc": func() (*Backend, error) { c := testConfig(t); c.Runtime = "runc"; return NewContainer(c) },
		"gvisor":         func() (*Backend, error) { return NewGVisor(testConfig(t)) },
	} {
		b, err := mk()
		if err != nil {
			t.Fatal(err)
		}
		out[name] = b
	}
	return out
}

// knownFailures are the rows a packaged runtime really fails, by its
// version, each recorded in an ADR: the backend stays uncertified on that
// runtime, and a run where the row holds again fails too (the ADR and this
// list must then change). Every other row must pass everywhere.
var knownFailures = map[string]map[int]string{
	"runc version 1.1.5+ds1": {16: "follows a symlinked /dev/null and truncates its target (CVE-2025-31133, fixed in runc 1.2.8): docs/adr/0010-runc.md"},
}

// TestBattery runs the certification battery: every applicable row has a
// probe that holds and a positive control that flags (on gvisor, rows its
// Sentry keeps safe whatever the spec says are controlled on the container
// backend), so every configuration certifies but for knownFailures. The
// configurations run in parallel: each probe makes its own sandboxes, uid
// slots and canaries.
func TestBattery(t *testing.T) {
	only := os.Getenv("WOVYR_BATTERY_ONLY") // e.g. "container-runc" while debugging one runtime
	for name, b := range batteryBackends(t) {
		if only != "" && !strings.Contains(name, only) {
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
			defer cancel()
			if c := b.Probe(ctx); !c.Available {
				t.Fatalf("%s unavailable: %s", name, c.Reason)
			}
			s := Suite(b, "busybox")
			rec, err := battery.Run(ctx, s, prefixed{name})
			if err != nil {
				t.Fatal(err)
			}
			impl := map[int]bool{}
			for _, p := range s.Probes {
				impl[p.ID] = true
			}
			known := knownFailures[rec.RuntimeVersion]
			for _, o := range rec.Outcomes {
				if why, ok := known[o.ID]; ok {
					if o.Applies && o.Pass {
						t.Errorf("#%d %s now holds on %s, known to fail (%s): update the ADR and knownFailures", o.ID, o.Name, rec.RuntimeVersion, why)
					}
					continue
				}
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
			if len(known) > 0 {
				if rec.Passed {
					t.Fatalf("%s certified despite its known failures %v", name, known)
				}
				t.Logf("%s (%s) stays uncertified, as recorded: %v", name, rec.RuntimeVersion, rec.Failed())
				return
			}
			if !rec.Passed {
				t.Fatalf("%s is not certified: %v", name, rec.Failed())
			}
		})
	}
}

// prefixed writes battery progress to stderr with each line tagged by its
// configuration, since the configurations run at once.
type prefixed struct{ name string }

func (p prefixed) Write(b []byte) (int, error) {
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if l != "" {
			os.Stderr.WriteString("[" + p.name + "] " + l)
		}
	}
	return len(b), nil
}
