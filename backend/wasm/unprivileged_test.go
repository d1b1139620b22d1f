package wasm

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/sandbox"
)

func unprivileged(c *Config) { c.StateDir, c.Unprivileged = c.StateDir+"-unprivileged", true }

// Issue #26: without root a workspace cannot be a sized tmpfs, so files in
// or out are refused with a typed error, and nothing is created.
func TestUnprivilegedRefusesWorkspaceFiles(t *testing.T) {
	b := newBackend(t, func(c *Config) { c.StateDir, c.Unprivileged = t.TempDir(), true })
	mod := mustWat(t, probeWAT)
	for field, w := range map[string]sandbox.Workload{
		"workload.files":   {Files: []sandbox.File{{Path: "in.txt", Data: []byte("x")}}},
		"workload.collect": {Collect: []string{"out.txt"}},
	} {
		in := inv(mod, "probe")
		in.Workload.Files, in.Workload.Collect = w.Files, w.Collect
		_, err := b.run(context.Background(), in, runOpts{})
		want := "policy-unenforceable (" + field + "): files in or out need a workspace with a disk quota (a tmpfs mount, which needs root): " + ErrNoWorkspace.Error()
		if err == nil || err.Error() != want || !errors.Is(err, ErrNoWorkspace) || sandbox.ClassOf(err) != sandbox.Unenforceable || sandbox.FieldOf(err) != field {
			t.Errorf("%s: err %v\nwant %q", field, err, want)
		}
		if cerr := b.CheckWorkload(&in.Workload); cerr == nil || cerr.Error() != want {
			t.Errorf("%s: CheckWorkload %v, want %q", field, cerr, want)
		}
	}
	if ents, err := os.ReadDir(b.work); err != nil || len(ents) != 0 {
		t.Fatalf("refused invocations left %v (%v) in the work dir", ents, err)
	}
	res, err := b.run(context.Background(), inv(mod, "probe"), runOpts{})
	if err != nil || res.Class != sandbox.OK || string(res.Stdout) != "ok" {
		t.Fatalf("a module without files, unprivileged: %+v %v", res, err)
	}
	if err := newBackend(t).CheckWorkload(&sandbox.Workload{Files: []sandbox.File{{Path: "a", Data: []byte("x")}}}); err != nil {
		t.Fatalf("with root, files were refused: %v", err)
	}
}

// Issue #26: a certification of one mode must never cover the other.
func TestUnprivilegedIsInTheConfigHashAndCapability(t *testing.T) {
	root, unpriv := newBackend(t), newBackend(t, unprivileged)
	rc, uc := root.Probe(context.Background()), unpriv.Probe(context.Background())
	if !rc.Available || !uc.Available {
		t.Fatalf("probes: root %+v, unprivileged %+v", rc, uc)
	}
	if rc.ConfigHash == uc.ConfigHash || rc.Unprivileged || !uc.Unprivileged {
		t.Fatalf("root %s %v, unprivileged %s %v: want different hashes and only the second unprivileged", rc.ConfigHash, rc.Unprivileged, uc.ConfigHash, uc.Unprivileged)
	}
	if !slices.Contains(rc.Features, "disk-quota") || slices.Contains(uc.Features, "disk-quota") || !slices.Contains(uc.Features, "no-workspace") {
		t.Fatalf("features: root %v, unprivileged %v", rc.Features, uc.Features)
	}
}

// Issue #26: unprivileged, the rows that need a writable workspace are
// recorded as not applicable with why (not as passed), every other row
// runs for real with its control, and the record says unprivileged.
func TestBatterySuiteCertifiesWasmUnprivileged(t *testing.T) {
	b := newBackend(t, unprivileged)
	rec, err := battery.Run(context.Background(), Suite(b), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Passed || !rec.Unprivileged || rec.ConfigHash != b.Probe(context.Background()).ConfigHash {
		t.Fatalf("record: passed %v unprivileged %v hash %s; failed %v", rec.Passed, rec.Unprivileged, rec.ConfigHash, rec.Failed())
	}
	na := unprivilegedNA()
	ran := map[int]bool{}
	for _, o := range rec.Outcomes {
		if why, ok := na[o.ID]; ok {
			if o.Applies || o.Pass || o.Why != why {
				t.Errorf("#%d %s: applies %v pass %v why %q, want not applicable because %q", o.ID, o.Name, o.Applies, o.Pass, o.Why, why)
			}
			continue
		}
		if o.Applies {
			ran[o.ID] = true
			if !o.Pass || !o.ControlFlagged {
				t.Errorf("#%d %s: pass %v control flagged %v: %s | %s", o.ID, o.Name, o.Pass, o.ControlFlagged, o.Observed, o.ControlObserved)
			}
		}
	}
	// The probes that work through fd 3 ran on the read-only stand-in.
	for _, id := range []int{54, 61, 62, 64, 65, 69} {
		if !ran[id] {
			t.Errorf("#%d did not run unprivileged", id)
		}
	}
}
