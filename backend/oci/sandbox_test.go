package oci

import (
	"context"
	"strings"
	"sync"
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

// newBackendsBothModes is newBackends plus each backend as a pool's
// (Config.Pooled, where the agent runs the workload rather than the
// runtime), for the tests that hold both paths to the same limits.
func newBackendsBothModes(t *testing.T) map[string]*Backend {
	t.Helper()
	m := newBackends(t)
	for _, c := range constructors {
		cfg := testConfig(t)
		cfg.Pooled = true
		b, err := c.new(cfg)
		if err != nil {
			t.Fatal(err)
		}
		m[c.name+"-pooled"] = b
	}
	return m
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
	return runChecked(t, b, inv, nil)
}

// runChecked is runID with a look at the prepared sandbox before its run.
func runChecked(t *testing.T, b *Backend, inv *sandbox.Invocation, prepared func(*Sandbox)) (*sandbox.Result, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand, Image: inv.Workload.Image})
	if err != nil {
		t.Fatal(err)
	}
	s := sb.(*Sandbox)
	if prepared != nil {
		prepared(s)
	}
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

// TestConcurrentSandboxesGetDistinctRanges prepares several sandboxes at
// once (released together) and checks each runs on its own host uid range.
func TestConcurrentSandboxesGetDistinctRanges(t *testing.T) {
	b := newBackends(t)["container"]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 6
	sbs := make([]*Sandbox, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			sb, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
			if err == nil {
				sbs[i] = sb.(*Sandbox)
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	seen := map[uint32]bool{}
	for i, s := range sbs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		defer func() {
			if err := s.Destroy(ctx); err != nil {
				t.Error(err)
			}
			assertNoLeftovers(t, b, s)
		}()
		if seen[s.slot.ids.HostUID] {
			t.Fatalf("two live sandboxes share host uid %d", s.slot.ids.HostUID)
		}
		seen[s.slot.ids.HostUID] = true
		res, err := s.Run(ctx, cmd("/bin/sh", "-c", "echo $$"))
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("run: %v %+v", err, res)
		}
	}
}
