package oci

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

func openSession(t *testing.T, b *Backend) *Sandbox {
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
	claim := &sandbox.Claim{ID: "sess1", Tenant: "acme", Image: "busybox", Policy: sandbox.Policy{Trust: sandbox.Trusted},
		Limits: sandbox.Limits{Wall: 10 * time.Second}}
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

func file(t *testing.T, s *Sandbox, op sandbox.FileOp) *sandbox.FileReply {
	t.Helper()
	fr, err := s.File(context.Background(), &op)
	if err != nil {
		t.Fatalf("file %s %s: %v", op.Op, op.Path, err)
	}
	return fr
}

// TestSessionExecAndFiles: files and the filesystem persist across execs
// of one session, each exec gets its own env, dir, stdin and limits, and a
// timed-out exec leaves the session usable.
func TestSessionExecAndFiles(t *testing.T) {
	for name, b := range newBackendsBothModes(t) {
		t.Run(name, func(t *testing.T) {
			s := openSession(t, b)
			file(t, s, sandbox.FileOp{Op: sandbox.FileWrite, Path: "main.sh", Data: []byte("echo hello $1 > out.txt\ncat out.txt\n"), Mode: 0o755})
			if res := execOK(t, s, sandbox.Exec{Argv: []string{"sh", "main.sh", "one"}}); string(res.Stdout) != "hello one\n" || res.ExitCode != 0 || res.Class != sandbox.OK {
				t.Fatalf("first exec: %+v", res)
			}
			if res := execOK(t, s, sandbox.Exec{Argv: []string{"cat", "out.txt"}}); string(res.Stdout) != "hello one\n" {
				t.Fatalf("second exec sees %q", res.Stdout)
			}
			if got := file(t, s, sandbox.FileOp{Op: sandbox.FileRead, Path: "out.txt"}).Data; string(got) != "hello one\n" {
				t.Fatalf("download %q", got)
			}
			var names []string
			for _, e := range file(t, s, sandbox.FileOp{Op: sandbox.FileList}).Entries {
				names = append(names, e.Path+":"+e.Type)
			}
			if !slices.Equal(names, []string{"main.sh:file", "out.txt:file"}) {
				t.Fatalf("list %v", names)
			}
			file(t, s, sandbox.FileOp{Op: sandbox.FileWrite, Path: "sub/x", Data: []byte("x")})
			res := execOK(t, s, sandbox.Exec{Argv: []string{"sh", "-c", "echo $FOO; pwd; cat"}, Env: []string{"FOO=bar"}, Dir: "sub", Stdin: []byte("in\n")})
			if string(res.Stdout) != "bar\n/workspace/sub\nin\n" {
				t.Fatalf("env, dir and stdin: %q", res.Stdout)
			}
			res = execOK(t, s, sandbox.Exec{Argv: []string{"sh", "-c", "echo 0123456789"}, Output: 4})
			if string(res.Stdout) != "0123" || !res.StdoutTruncated {
				t.Fatalf("output cap: %q truncated=%v", res.Stdout, res.StdoutTruncated)
			}
			res = execOK(t, s, sandbox.Exec{Argv: []string{"sleep", "5"}, Wall: 300 * time.Millisecond})
			if res.Class != sandbox.Timeout {
				t.Fatalf("sleep past its wall: %+v", res)
			}
			file(t, s, sandbox.FileOp{Op: sandbox.FileRemove, Path: "out.txt"})
			_, err := s.File(context.Background(), &sandbox.FileOp{Op: sandbox.FileRead, Path: "out.txt"})
			if sandbox.ClassOf(err) != sandbox.NotFound || err.Error() != "not-found (path): openat out.txt: no such file or directory" {
				t.Fatalf("read after remove: %v", err)
			}
			if res := execOK(t, s, sandbox.Exec{Argv: []string{"ls"}}); string(res.Stdout) != "main.sh\nsub\n" {
				t.Fatalf("after the timeout and the remove: %q", res.Stdout)
			}
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
				res := execOK(t, s, sandbox.Exec{Argv: []string{"sh", "-c", "cat /proc/[0-9]*/comm"}})
				sleeping := slices.Contains(strings.Fields(string(res.Stdout)), "sleep")
				if sleeping != weak {
					t.Errorf("a sleep left by the last exec: %v, want %v (processes: %q)", sleeping, weak, res.Stdout)
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
