package oci

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/sandbox/sandboxtest"
)

func openSession(t *testing.T, b *Backend) *Sandbox {
	t.Helper()
	return openSessionFor(t, b, &sandbox.Claim{ID: "sess1", Tenant: "acme", Image: "busybox", Policy: sandbox.Policy{Trust: sandbox.Trusted},
		Limits: sandbox.Limits{Wall: 10 * time.Second}})
}

// openSessionFor prepares a busybox sandbox and opens it for claim; it is
// destroyed, and checked gone from the host, when the test ends.
func openSessionFor(t *testing.T, b *Backend, claim *sandbox.Claim) *Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand, Image: "busybox"})
	if err != nil {
		t.Fatal(err)
	}
	s := sb.(*Sandbox)
	t.Cleanup(func() {
		if err := s.Destroy(context.Background()); err != nil {
			t.Error(err)
		}
		assertNoLeftovers(t, b, s)
	})
	if err := s.Open(ctx, claim); err != nil {
		t.Fatal(err)
	}
	return s
}

func execOK(t *testing.T, s *Sandbox, e sandbox.Exec) *sandbox.Result {
	t.Helper()
	res, err := s.Exec(context.Background(), &e)
	if err != nil {
		t.Fatalf("exec %q: %v", e.Argv, err)
	}
	return res
}

// TestSessionConformance runs the session cases of the conformance suite
// on both backends, pooled and one-shot (whose agent starts at Open).
func TestSessionConformance(t *testing.T) {
	for name, b := range newBackendsBothModes(t) {
		t.Run(name, func(t *testing.T) {
			sandboxtest.RunSession(t, b, sandboxtest.Options{Image: "busybox", Template: sandbox.Template{Image: "busybox"}})
		})
	}
}

// TestSessionRefusals: bad requests change nothing and say why.
func TestSessionRefusals(t *testing.T) {
	b := newBackends(t)["container"]
	s := openSession(t, b)
	ctx := context.Background()
	execOK(t, s, sandbox.Exec{Argv: []string{"ln", "-s", "/etc/passwd", "pw"}})
	cases := []struct {
		err  error
		want string
	}{
		{s.Open(ctx, &sandbox.Claim{ID: "again", Tenant: "beta", Policy: sandbox.Policy{Trust: sandbox.Trusted}}),
			"backend-failure: sandbox " + s.id + " already ran an invocation or was destroyed"},
		{second(s.Run(ctx, &sandbox.Invocation{Tenant: "beta", Policy: sandbox.Policy{Trust: sandbox.Trusted}, Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"true"}}})),
			"backend-failure: sandbox " + s.id + " already ran an invocation or was destroyed"},
		{second(s.Exec(ctx, &sandbox.Exec{Argv: []string{"true"}, Wall: time.Minute})), "bad-input (wall): must be between 0 and the session's wall limit (10s)"},
		{second(s.Exec(ctx, &sandbox.Exec{Argv: []string{"true"}, Dir: "../x"})), `bad-input (dir): working directory "../x": path leaves the workspace`},
		{second(s.File(ctx, &sandbox.FileOp{Op: sandbox.FileRead, Path: "pw"})), "bad-input (path): openat pw: path escapes from parent"},
		{second(s.File(ctx, &sandbox.FileOp{Op: sandbox.FileWrite, Path: "/etc/x"})), "bad-input (path): absolute path"},
	}
	for _, c := range cases {
		if c.err == nil || c.err.Error() != c.want {
			t.Errorf("got %v, want %s", c.err, c.want)
		}
	}
	if res := execOK(t, s, sandbox.Exec{Argv: []string{"ls"}}); string(res.Stdout) != "pw\n" {
		t.Fatalf("the workspace after the refusals: %q", res.Stdout)
	}
	fresh, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Destroy(ctx)
	if _, err := fresh.(*Sandbox).Exec(ctx, &sandbox.Exec{Argv: []string{"true"}}); !errors.Is(err, sandbox.BadInput) {
		t.Errorf("exec before Open: %v", err)
	}
}

func second[T any](_ T, err error) error { return err }

// leftoverScript starts a process that leaves the exec's process group and
// session, so only a sweep of the whole pid namespace ends it; it waits
// until the new session exists (the job's group is killed as it ends).
const leftoverScript = `setsid sh -c 'echo $$ >.pid; exec sleep 600' </dev/null >/dev/null 2>&1 &
while [ ! -s .pid ]; do :; done; echo started`

// TestSessionExecKillsLeftovers: a process an exec left behind, outside
// its process group, is gone before the next exec, seen from inside the
// sandbox and, for runc/crun, in the host's cgroup; the KeepLeftovers
// control, which skips the sweep, keeps it.
func TestSessionExecKillsLeftovers(t *testing.T) {
	for name, b := range newBackends(t) {
		for _, weak := range []bool{false, true} {
			t.Run(name+map[bool]string{false: "", true: "/keep-leftovers"}[weak], func(t *testing.T) {
				bk := b
				if weak {
					wb, err := b.Weakened(KeepLeftovers)
					if err != nil {
						t.Fatal(err)
					}
					bk = wb.(*Backend)
				}
				s := openSession(t, bk)
				if res := execOK(t, s, sandbox.Exec{Argv: []string{"sh", "-c", leftoverScript}}); string(res.Stdout) != "started\n" {
					t.Fatalf("leftover: %+v", res)
				}
				// By the pid it wrote, not by name: the leftover may still be
				// between its shell and its exec of sleep (busybox re-executes
				// itself as /proc/self/exe, so its comm is "exe" meanwhile).
				res := execOK(t, s, sandbox.Exec{Argv: []string{"sh", "-c",
					`p=$(cat .pid); if [ -d /proc/$p ] && ! grep -q '^State:.*Z' /proc/$p/status; then echo alive; else echo gone; fi; cat /proc/[0-9]*/comm`}})
				out := strings.Fields(string(res.Stdout))
				alive := len(out) > 0 && out[0] == "alive"
				if alive != weak {
					t.Errorf("the process left by the last exec alive: %v, want %v (output: %q)", alive, weak, res.Stdout)
				}
				if !bk.gvisor {
					if pids := cgroupProcs(poolCgroup(s.id)); !weak && !slices.Equal(pids, []int{s.agentPID}) {
						t.Errorf("host cgroup of %s holds %v, want only the agent %d", s.id, pids, s.agentPID)
					}
				}
			})
		}
	}
}
