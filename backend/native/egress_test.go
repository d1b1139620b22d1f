package native

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/egress/egresstest"
	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/sandbox"
)

// TestMain lets the test binary double as the egress probe (the truth-table
// test runs it as the workload) and as a wovyr that dies mid-run.
func TestMain(m *testing.M) {
	if spec := os.Getenv(egresstest.ProbeEnv); spec != "" {
		os.Exit(egresstest.RunProbe(spec))
	}
	if scratch := os.Getenv(dyingWovyrEnv); scratch != "" {
		os.Exit(dyingWovyr(scratch))
	}
	os.Exit(m.Run())
}

// probeBinary copies the test binary where a sandbox uid can execute it.
func probeBinary(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "wovyr-native-probe-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "probe")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEgressTruthTable runs BATTERY 70–84 through the real native backend
// with an egress service: the workload (and a re-executed child of it) sees
// exactly the tenant's allowlist, and nothing is left behind.
func TestEgressTruthTable(t *testing.T) {
	ctx := context.Background()
	if os.Geteuid() != 0 {
		t.Fatal("needs root (CI runs as root)")
	}
	rig, err := egresstest.New(ctx, "na")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := rig.Close(); err != nil {
			t.Error(err)
		}
	}()
	cfg := rig.Config()
	if err := egress.Reconcile(ctx, cfg, nil); err != nil {
		t.Fatal(err)
	}
	svc, err := egress.NewService(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	scratch, err := os.MkdirTemp("", "wovyr-native-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(scratch)
	b, err := New(Config{ScratchDir: scratch, Network: svc})
	if err != nil {
		t.Fatal(err)
	}
	if capa := b.Probe(ctx); !capa.Available || !capa.Egress {
		t.Fatalf("probe with an egress service: %+v", capa)
	}

	// Another tenant's sandbox, prepared alongside: its address must be unreachable.
	peer, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Destroy(ctx)
	sb, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	slot := sb.(*nativeSandbox).slot
	rows := egresstest.TruthTable(slot.Gateway().String(), peer.(*nativeSandbox).slot.Addr().String())
	spec := egresstest.ProbeSpec{Checks: egresstest.Checks(rows), CA: rig.CAPEM, DNS: slot.Gateway().String() + ":53"}
	child := spec
	child.Checks = egresstest.Checks(egresstest.ChildRows(rows))
	spec.Child = &child
	js, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sb.Run(ctx, &sandbox.Invocation{
		ID:       "inv-native-1",
		Tenant:   "tenant-a",
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{probeBinary(t)}, Env: []string{egresstest.ProbeEnv + "=" + string(js)}},
		Limits:   sandbox.Limits{Wall: 2 * time.Minute, Pids: 512},
		Policy:   sandbox.Policy{Trust: sandbox.Trusted, Network: egresstest.TenantPolicy},
	})
	if err != nil {
		t.Fatal(err)
	}
	if derr := sb.Destroy(ctx); derr != nil {
		t.Fatal(derr)
	}
	if res.Class != sandbox.OK || res.ExitCode != 0 {
		t.Fatalf("probe: class %q exit %d: %s\n%s", res.Class, res.ExitCode, res.Error, res.Stderr)
	}
	var rep egresstest.Report
	if err := json.Unmarshal(res.Stdout, &rep); err != nil {
		t.Fatalf("report: %v\n%s\n%s", err, res.Stdout, res.Stderr)
	}
	egresstest.AssertTable(t, rows, rep, 0)
	if rep.Child == nil {
		t.Fatalf("child report missing: %s", rep.ChildErr)
	}
	egresstest.AssertTable(t, egresstest.ChildRows(rows), *rep.Child, 1)
	for _, q := range rig.Queries() {
		if strings.Contains(q, egresstest.Canary) {
			t.Errorf("the harness DNS server saw the canary: %s", q)
		}
	}

	if err := peer.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := svc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if left, err := egress.Find(ctx, cfg); err != nil || !left.Empty() {
		t.Errorf("leftovers: %+v %v", left, err)
	}
}

// TestEgressRefusesUnenforceable: the policy check happens before the
// sandbox is claimed, with a typed error.
func TestEgressRefusesUnenforceable(t *testing.T) {
	ctx := context.Background()
	rig, err := egresstest.New(ctx, "nb")
	if err != nil {
		t.Fatal(err)
	}
	defer rig.Close()
	svc, err := egress.NewService(ctx, rig.Config(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(ctx)
	scratch, _ := os.MkdirTemp("", "wovyr-native-test-")
	defer os.RemoveAll(scratch)
	b, err := New(Config{ScratchDir: scratch, Network: svc})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(ctx)
	inv := &sandbox.Invocation{Tenant: "a", Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/true"}},
		Policy: sandbox.Policy{Trust: sandbox.Trusted, Network: netpolicy.Policy{Allow: []netpolicy.Rule{{CIDR: "fd00::/8", Ports: []uint16{443}}}}}}
	if _, err := sb.Run(ctx, inv); sandbox.ClassOf(err) != sandbox.Unenforceable {
		t.Fatalf("IPv6 allowlist: %v, want policy-unenforceable", err)
	}
	inv.Policy.Network = netpolicy.Policy{Allow: []netpolicy.Rule{{Host: "a.test", Ports: []uint16{0}}}}
	if _, err := sb.Run(ctx, inv); sandbox.ClassOf(err) != sandbox.BadInput {
		t.Fatalf("port 0: %v, want bad-input", err)
	}
	// Still unclaimed: a good invocation runs.
	inv.Policy.Network = netpolicy.Policy{}
	if res, err := sb.Run(ctx, inv); err != nil || res.ExitCode != 0 {
		t.Fatalf("deny-all run after refusals: %v %+v", err, res)
	}
}
