package oci

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/wovyr/wovyr/egress/egresstest"
	"github.com/wovyr/wovyr/sandbox"
)

// TestSessionEgressTruthTable: a session's network policy, bound at Open,
// holds for each of its execs and their children (BATTERY 70–84's table,
// run twice in one session), on container and on gVisor (a sandbox
// prepared for an allowlist, netstack in its slot).
func TestSessionEgressTruthTable(t *testing.T) {
	r := newEgressRig(t, "os")
	for _, b := range []*Backend{r.b, gvisorIn(t, r)} {
		t.Run(b.name, func(t *testing.T) {
			img := egressImage(t)
			tmpl := sandbox.Template{Kind: sandbox.KindCommand, Image: img, Limits: sandbox.Limits{Pids: 512}, Egress: true}
			peer := prepareTmpl(t, b, tmpl)
			s := prepareTmpl(t, b, tmpl)
			ctx := context.Background()
			err := s.Open(ctx, &sandbox.Claim{ID: "sess-egress", Tenant: "tenant-a", Image: img,
				Limits: sandbox.Limits{Wall: time.Minute, Pids: 512}, Policy: sandbox.Policy{Trust: sandbox.Trusted, Network: egresstest.TenantPolicy}})
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				assertSessionTable(t, r, s, peer)
			}
			assertCleanEnd(t, r, b, s, peer)
		})
	}
}

// assertSessionTable runs the sandbox truth table (BATTERY 70–84) as one
// exec of the open session s, through s's slot, with peer beside it.
func assertSessionTable(t *testing.T, r *egressRig, s, peer *Sandbox) {
	t.Helper()
	gw := s.net.Gateway().String()
	rows := egresstest.SandboxTable(gw, peer.net.Addr().String())
	js, err := json.Marshal(egresstest.TableSpec(rows, r.rig.CAPEM, gw))
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Exec(context.Background(), &sandbox.Exec{Argv: []string{probeBin}, Env: []string{egresstest.ProbeEnv + "=" + string(js)}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := egresstest.ParseReport(res)
	if err != nil {
		t.Fatal(err)
	}
	assertTableReport(t, rows, rep)
}
