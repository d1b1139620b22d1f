package oci

import (
	"context"
	"testing"
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
