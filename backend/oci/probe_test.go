package oci

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/sandbox"
)

// TestProbeEachRuntime probes every runtime on its own and logs why one
// does not work; the container backend must find one of crun/runc.
func TestProbeEachRuntime(t *testing.T) {
	ok := false
	for _, rt := range []string{"crun", "runc"} {
		cfg := testConfig(t)
		cfg.Runtime = rt
		b, err := NewContainer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c := b.Probe(context.Background())
		t.Logf("%s: available=%v version=%q reason=%q", rt, c.Available, c.Version, c.Reason)
		ok = ok || c.Available
	}
	if !ok {
		t.Fatal("neither crun nor runc works")
	}
	g, err := NewGVisor(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	c := g.Probe(context.Background())
	t.Logf("runsc: available=%v version=%q accel=%q reason=%q", c.Available, c.Version, c.Accel, c.Reason)
	if c.Available && c.Accel == "kvm" {
		t.Fatal("runsc probe picked kvm")
	}
}

// TestProbeRaisesInotifyBudget: a probe leaves host root's inotify
// instance budget, which every sandbox's user namespace is charged to, at
// Slots × DefaultNoFile at least, and says so in its features (ADR 0027).
func TestProbeRaisesInotifyBudget(t *testing.T) {
	b, err := NewContainer(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	c := b.Probe(context.Background())
	if !c.Available {
		t.Fatalf("probe: %s", c.Reason)
	}
	raw, err := os.ReadFile(inotifyBudgetFile)
	if err != nil {
		t.Fatal(err)
	}
	have, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	if want := b.cfg.Slots * sandbox.DefaultNoFile; have < want {
		t.Fatalf("%s = %d after the probe, want at least %d", inotifyBudgetFile, have, want)
	}
	if !slices.Contains(c.Features, "inotify-budget="+strconv.Itoa(have)) {
		t.Fatalf("features %v do not record the budget %d", c.Features, have)
	}
}
