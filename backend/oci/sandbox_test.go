package oci

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

func newBackends(t *testing.T) map[string]*Backend {
	t.Helper()
	c, err := NewContainer(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGVisor(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	return map[string]*Backend{"container": c, "gvisor": g}
}

func run(t *testing.T, b *Backend, inv *sandbox.Invocation) *sandbox.Result {
	t.Helper()
	res, _ := runID(t, b, inv)
	return res
}

// runID prepares, runs and destroys one sandbox, then checks the host kept
// nothing of it; it returns the result and the sandbox's id.
func runID(t *testing.T, b *Backend, inv *sandbox.Invocation) (*sandbox.Result, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand, Image: inv.Workload.Image})
	if err != nil {
		t.Fatal(err)
	}
	s := sb.(*Sandbox)
	res, err := sb.Run(ctx, inv)
	if derr := sb.Destroy(ctx); derr != nil {
		t.Error(derr)
	}
	assertNoLeftovers(t, b, s)
	if err != nil {
		t.Fatal(err)
	}
	return res, s.id
}

func cmd(argv ...string) *sandbox.Invocation {
	return &sandbox.Invocation{Tenant: "acme", Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: argv},
		Policy: sandbox.Policy{Trust: sandbox.Untrusted}}
}

func TestIDAndCaps(t *testing.T) {
	for name, b := range newBackends(t) {
		t.Run(name, func(t *testing.T) {
			res := run(t, b, cmd("/bin/sh", "-c", "id; grep Cap /proc/self/status"))
			out := string(res.Stdout)
			t.Logf("%s", out)
			if res.ExitCode != 0 || res.Class != sandbox.OK {
				t.Fatalf("exit %d class %q stderr %s", res.ExitCode, res.Class, res.Stderr)
			}
			if !strings.Contains(out, "uid=0(root)") {
				t.Errorf("want uid 0 inside, got %s", out)
			}
			if !strings.Contains(out, "CapEff:\t0000000000000000") {
				t.Errorf("want no effective capabilities, got %s", out)
			}
		})
	}
}
