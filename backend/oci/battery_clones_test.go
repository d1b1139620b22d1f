package oci

import (
	"context"
	"testing"

	"github.com/wovyr/wovyr/battery"
)

// TestGVisorCloneRows runs the snapshot rows on gVisor and their controls:
// each row holds on the backend and flags its weakened copy, and the
// copies' goldens are gone afterwards.
func TestGVisorCloneRows(t *testing.T) {
	b := newBackends(t)["gvisor"]
	ctx := context.Background()
	if c := b.Probe(ctx); !c.Available {
		t.Fatal(c.Reason)
	}
	for _, p := range cloneProbes(b) {
		if o := p.Run(ctx, battery.Target{Backend: b, Image: "busybox"}); !o.Secure {
			t.Errorf("row %d: %s: %s", p.ID, o.Tried, o.Observed)
		}
		w, err := b.Weakened(p.Weakness)
		if err != nil {
			t.Fatal(err)
		}
		if o := p.Run(ctx, battery.Target{Backend: w, Image: "busybox"}); o.Secure {
			t.Errorf("row %d's control %s did not flag: %s", p.ID, p.Weakness, o.Observed)
		} else {
			t.Logf("row %d's control %s: %s", p.ID, p.Weakness, o.Observed)
		}
	}
	store, err := b.snapshots()
	if err != nil {
		t.Fatal(err)
	}
	if left, err := store.Reconcile(b.name, nil); err != nil || len(left) != 0 {
		t.Errorf("goldens left behind: %v %v", left, err)
	}
}
