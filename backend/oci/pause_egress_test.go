package oci

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/wovyr/wovyr/egress/egresstest"
	"github.com/wovyr/wovyr/sandbox"
)

// TestGVisorNetstackPauseResume: a gVisor session in an egress slot
// (netstack, an allowlist) pauses by checkpoint, its slot going with its
// sandbox, and resumes in another slot: its files and its background
// process are as they were, and the whole egress truth table (BATTERY
// 70–84) holds again through the new slot, whose address the restored
// netstack now has — the slot bound to the session's tenant and policy
// before runsc restored the Sentry. Nothing is left of either sandbox.
func TestGVisorNetstackPauseResume(t *testing.T) {
	r := newEgressRig(t, "op")
	g := gvisorIn(t, r)
	ctx := context.Background()
	img := egressImage(t)
	tmpl := sandbox.Template{Kind: sandbox.KindCommand, Image: img, Limits: sandbox.Limits{Pids: 512}, Egress: true}
	claim := &sandbox.Claim{ID: "sess-egress-pause", Tenant: "tenant-a", Image: img,
		Limits: sandbox.Limits{Wall: time.Minute, Pids: 512}, Policy: sandbox.Policy{Trust: sandbox.Trusted, Network: egresstest.TenantPolicy}}
	peer := prepareTmpl(t, g, tmpl)
	s := prepareTmpl(t, g, tmpl)
	if err := s.Open(ctx, claim); err != nil {
		t.Fatal(err)
	}
	assertSessionTable(t, r, s, peer)
	execOK(t, s, sandbox.Exec{Argv: []string{"sh", "-c", "echo kept > kept.txt"}})
	bg := startOK(t, s, sandbox.Exec{ID: "counter", Argv: counter})
	time.Sleep(200 * time.Millisecond)
	before := count(t, s)
	oldAddr, oldNetns := s.net.Addr(), s.net.NetnsPath()

	p, err := s.Pause(ctx, "tenant-a")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Discard(ctx, p) })
	if err := s.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	assertNoLeftovers(t, g, s)
	if _, err := os.Stat(oldNetns); !os.IsNotExist(err) {
		t.Errorf("the paused sandbox's slot %s outlives it: %v", oldNetns, err)
	}

	sb, err := g.Resume(ctx, p, "tenant-a")
	if err != nil {
		t.Fatal(err)
	}
	res := sb.(*Sandbox)
	t.Cleanup(func() { _ = res.Destroy(ctx) })
	// Slots are handed out in turn, so this one is not the paused one's:
	// the restored netstack must have taken the new slot's address.
	if res.net == nil || res.net.Addr() == oldAddr {
		t.Fatalf("resumed in slot %v, want a slot other than the paused one's (%v)", res.net, oldAddr)
	}
	if err := res.Open(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if out := execOK(t, res, sandbox.Exec{Argv: []string{"cat", "kept.txt"}}); string(out.Stdout) != "kept\n" {
		t.Errorf("kept.txt after resume: %q", out.Stdout)
	}
	assertCarriesOn(t, res, bg.Pid, before)
	assertSessionTable(t, r, res, peer)
	if err := g.Discard(ctx, p); err != nil {
		t.Fatal(err)
	}
	assertCleanEnd(t, r, g, res, peer)
}
