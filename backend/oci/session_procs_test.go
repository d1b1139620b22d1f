package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

func startOK(t *testing.T, s *Sandbox, e sandbox.Exec) *sandbox.Process {
	t.Helper()
	e.Background = true
	p, err := s.Start(context.Background(), &e)
	if err != nil {
		t.Fatalf("start %q: %v", e.Argv, err)
	}
	if !p.Running || p.Pid <= 1 {
		t.Fatalf("start %q: %+v, want running with a pid", e.Argv, p)
	}
	return p
}

// alive is what a later exec sees of pid from inside: "alive", or "gone"
// (no such process, or a zombie).
func alive(t *testing.T, s *Sandbox, pid int) string {
	t.Helper()
	res := execOK(t, s, sandbox.Exec{Argv: []string{"sh", "-c",
		fmt.Sprintf(`if [ -d /proc/%d ] && ! grep -q '^State:.*Z' /proc/%d/status; then echo alive; else echo gone; fi`, pid, pid)}})
	return strings.TrimSpace(string(res.Stdout))
}

// waitEnded polls id until it is reported ended: a process's exit has no
// file to wait on.
func waitEnded(t *testing.T, s *Sandbox, id string) *sandbox.Process {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		p, err := s.Process(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if !p.Running {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still running: %+v", id, p)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSessionBackground: a background process survives the next exec and
// its sweep while that exec's own leftover does not (the positive
// control), is listed, and is gone once killed; one that writes and exits
// shows its exit code and exact output.
func TestSessionBackground(t *testing.T) {
	for name, b := range newBackends(t) {
		t.Run(name, func(t *testing.T) {
			s := openSession(t, b)
			sl := startOK(t, s, sandbox.Exec{ID: "sleeper", Argv: []string{"sleep", "600"}})
			if res := execOK(t, s, sandbox.Exec{Argv: []string{"sh", "-c", leftoverScript}}); string(res.Stdout) != "started\n" {
				t.Fatalf("leftover: %+v", res)
			}
			res := execOK(t, s, sandbox.Exec{Argv: []string{"sh", "-c", "cat .pid"}})
			leftover := strings.TrimSpace(string(res.Stdout))
			var lp int
			if _, err := fmt.Sscan(leftover, &lp); err != nil {
				t.Fatalf("leftover pid %q", leftover)
			}
			if got := alive(t, s, lp); got != "gone" {
				t.Errorf("the foreground leftover %d after its exec: %s, want gone", lp, got)
			}
			if got := alive(t, s, sl.Pid); got != "alive" {
				t.Errorf("the background sleeper %d after two execs: %s, want alive", sl.Pid, got)
			}

			ps, err := s.Processes(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(ps) != 1 || ps[0].ID != "sleeper" || ps[0].Pid != sl.Pid || !ps[0].Running || !slices.Equal(ps[0].Argv, []string{"sleep", "600"}) {
				t.Fatalf("processes: %+v", ps)
			}

			w := startOK(t, s, sandbox.Exec{ID: "writer", Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}})
			p := waitEnded(t, s, w.ID)
			if p.ExitCode != 3 || p.Signal != "" || string(p.Stdout) != "out\n" || string(p.Stderr) != "err\n" || p.Killed || p.Ended.IsZero() {
				t.Errorf("writer ended: %+v", p)
			}

			k, err := s.Kill(context.Background(), "sleeper")
			if err != nil {
				t.Fatal(err)
			}
			if !k.Killed || k.Running || k.ExitCode != 137 || k.Signal != "killed" {
				t.Errorf("killed sleeper: %+v", k)
			}
			if got := alive(t, s, sl.Pid); got != "gone" {
				t.Errorf("the sleeper %d after its kill: %s, want gone", sl.Pid, got)
			}
			if _, err := s.Process(context.Background(), "sleeper"); !errors.Is(err, sandbox.NotFound) {
				t.Errorf("a killed process read again: %v", err)
			}
			if _, err := s.Kill(context.Background(), "sleeper"); err == nil || err.Error() != "not-found (process): no background process sleeper in this session" {
				t.Errorf("a killed process killed again: %v", err)
			}
			// The writer, ended, is still held until killed; its kill keeps
			// its own status.
			if k, err := s.Kill(context.Background(), "writer"); err != nil || k.Killed || k.ExitCode != 3 || string(k.Stdout) != "out\n" {
				t.Errorf("kill of the ended writer: %+v, %v", k, err)
			}
			if ps, err := s.Processes(context.Background()); err != nil || len(ps) != 0 {
				t.Errorf("processes after both kills: %+v, %v", ps, err)
			}
		})
	}
}

// TestSessionBackgroundKillsItsSession: a kill ends every process of the
// background process's session, its children too.
func TestSessionBackgroundKillsItsSession(t *testing.T) {
	for name, b := range newBackends(t) {
		t.Run(name, func(t *testing.T) {
			s := openSession(t, b)
			startOK(t, s, sandbox.Exec{ID: "tree", Argv: []string{"sh", "-c", "sleep 600 & echo $! >child.pid; wait"}})
			res := execOK(t, s, sandbox.Exec{Argv: []string{"sh", "-c", "while [ ! -s child.pid ]; do :; done; cat child.pid"}})
			var child int
			if _, err := fmt.Sscan(string(res.Stdout), &child); err != nil {
				t.Fatalf("child pid %q", res.Stdout)
			}
			if got := alive(t, s, child); got != "alive" {
				t.Fatalf("the background process's child: %s", got)
			}
			if _, err := s.Kill(context.Background(), "tree"); err != nil {
				t.Fatal(err)
			}
			if got := alive(t, s, child); got != "gone" {
				t.Errorf("the child %d after its session's kill: %s, want gone", child, got)
			}
		})
	}
}

// TestSessionBackgroundCannotShelterLeftovers: a foreground leftover that
// tries to join a background process's group (setpgid) is refused by the
// kernel; it then leaves its job's group (setsid), so only the sweep can
// end it, and is swept at its exec's end while the background process
// lives.
func TestSessionBackgroundCannotShelterLeftovers(t *testing.T) {
	helper := filepath.Join(t.TempDir(), "joinpgid")
	build := exec.Command("go", "build", "-o", helper, "./testdata/joinpgid")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the helper: %v\n%s", err, out)
	}
	bin, err := os.ReadFile(helper)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range newBackends(t) {
		t.Run(name, func(t *testing.T) {
			s := openSession(t, b)
			if _, err := s.File(context.Background(), &sandbox.FileOp{Op: sandbox.FileWrite, Path: "joinpgid", Data: bin, Mode: 0o755}); err != nil {
				t.Fatal(err)
			}
			sl := startOK(t, s, sandbox.Exec{Argv: []string{"sleep", "600"}})
			res := execOK(t, s, sandbox.Exec{Argv: []string{"sh", "-c",
				fmt.Sprintf(`./joinpgid %d out </dev/null >/dev/null 2>&1 & while [ ! -s out.pid ]; do :; done; cat out`, sl.Pid)}})
			if got := string(res.Stdout); got != "operation not permitted\n" {
				t.Errorf("setpgid into the background's group: %q, want EPERM", got)
			}
			res = execOK(t, s, sandbox.Exec{Argv: []string{"cat", "out.pid"}})
			var hp int
			if _, err := fmt.Sscan(string(res.Stdout), &hp); err != nil {
				t.Fatalf("helper pid %q", res.Stdout)
			}
			if got := alive(t, s, hp); got != "gone" {
				t.Errorf("the leftover %d that tried to join: %s, want gone", hp, got)
			}
			if got := alive(t, s, sl.Pid); got != "alive" {
				t.Errorf("the background process: %s, want alive", got)
			}
		})
	}
}

// TestSessionBackgroundRefusals: one process more than the bound, stdin,
// a wall limit and a background exec through Exec are typed bad input
// that starts nothing.
func TestSessionBackgroundRefusals(t *testing.T) {
	b := newBackends(t)["container"]
	s := openSession(t, b)
	ctx := context.Background()
	for i := range sandbox.MaxBackground {
		startOK(t, s, sandbox.Exec{ID: fmt.Sprintf("s%d", i), Argv: []string{"sleep", "600"}})
	}
	cases := []struct {
		err  error
		want string
	}{
		{second(s.Start(ctx, &sandbox.Exec{Argv: []string{"sh", "-c", "touch extra"}, Background: true})),
			"bad-input (background): the session holds 16 background processes, the most it may (kill one first)"},
		{second(s.Start(ctx, &sandbox.Exec{Argv: []string{"cat"}, Stdin: []byte("x"), Background: true})), "bad-input (stdin): a background exec takes no stdin (open_stdin streams it)"},
		{second(s.Start(ctx, &sandbox.Exec{Argv: []string{"true"}, Wall: time.Second, Background: true})),
			"bad-input (wall): a background exec has no wall limit: it runs until it exits, is killed or its session ends"},
		{second(s.Exec(ctx, &sandbox.Exec{Argv: []string{"true"}, Background: true})), "bad-input (background): a background exec is started with Start (sandbox.Processes)"},
		{second(s.Process(ctx, "nope")), "not-found (process): no background process nope in this session"},
	}
	for _, c := range cases {
		if c.err == nil || c.err.Error() != c.want {
			t.Errorf("got %v, want %s", c.err, c.want)
		}
	}
	if ps, err := s.Processes(ctx); err != nil || len(ps) != sandbox.MaxBackground {
		t.Fatalf("processes after the refusals: %d, %v", len(ps), err)
	}
	if res := execOK(t, s, sandbox.Exec{Argv: []string{"ls"}}); string(res.Stdout) != "" {
		t.Errorf("the refused exec ran: %q", res.Stdout)
	}
	if _, err := s.Kill(ctx, "s0"); err != nil {
		t.Fatal(err)
	}
	// A command that cannot start is an ended process, as a foreground
	// exec reports it, and is not held.
	p, err := s.Start(ctx, &sandbox.Exec{Argv: []string{"no-such-cmd"}, Background: true})
	if err != nil || p.Running || p.ExitCode != 127 || string(p.Stderr) != "wovyr: no-such-cmd: command not found\n" {
		t.Errorf("a missing command: %+v, %v", p, err)
	}
	startOK(t, s, sandbox.Exec{ID: "again", Argv: []string{"sleep", "600"}})
	if ps, err := s.Processes(ctx); err != nil || len(ps) != sandbox.MaxBackground {
		t.Fatalf("processes after a kill and a start: %d, %v", len(ps), err)
	}
}

// TestSessionStdinStreaming: a background process started with an open
// stdin reads what the host writes to it while it runs, and the end of
// file once a write closes it; a write never waits for a process that
// does not read (a full pipe takes part of it); a process without an open
// stdin, a closed one and an unknown id are refused, typed.
func TestSessionStdinStreaming(t *testing.T) {
	for name, b := range newBackends(t) {
		t.Run(name, func(t *testing.T) {
			s := openSession(t, b)
			ctx := context.Background()
			startOK(t, s, sandbox.Exec{ID: "cat", Argv: []string{"cat"}, OpenStdin: true})
			if n, err := s.WriteStdin(ctx, "cat", []byte("hello\n"), false); err != nil || n != 6 {
				t.Fatalf("write: %d %v", n, err)
			}
			if n, err := s.WriteStdin(ctx, "cat", []byte("world"), true); err != nil || n != 5 {
				t.Fatalf("write and close: %d %v", n, err)
			}
			p := waitEnded(t, s, "cat")
			if p.ExitCode != 0 || string(p.Stdout) != "hello\nworld" {
				t.Errorf("cat after its stdin closed: exit %d stdout %q", p.ExitCode, p.Stdout)
			}
			if _, err := s.WriteStdin(ctx, "cat", []byte("more"), false); sandbox.ClassOf(err) != sandbox.Conflict {
				t.Errorf("a write after the close: %v, want a conflict", err)
			}

			startOK(t, s, sandbox.Exec{ID: "deaf", Argv: []string{"sleep", "600"}, OpenStdin: true})
			big := make([]byte, sandbox.MaxStdinWrite)
			start := time.Now()
			n, err := s.WriteStdin(ctx, "deaf", big, false)
			if err != nil || n <= 0 || n >= len(big) {
				t.Errorf("a write to a process that does not read: %d of %d, %v; want part of it", n, len(big), err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("the write waited %s", d)
			}
			startOK(t, s, sandbox.Exec{ID: "closed", Argv: []string{"sleep", "600"}})
			if _, err := s.WriteStdin(ctx, "closed", []byte("x"), false); sandbox.ClassOf(err) != sandbox.Conflict {
				t.Errorf("a write to a process without an open stdin: %v, want a conflict", err)
			}
			if _, err := s.WriteStdin(ctx, "nosuch", []byte("x"), false); sandbox.ClassOf(err) != sandbox.NotFound {
				t.Errorf("a write to an unknown process: %v, want not-found", err)
			}
			if _, err := s.WriteStdin(ctx, "deaf", make([]byte, sandbox.MaxStdinWrite+1), false); sandbox.ClassOf(err) != sandbox.BadInput {
				t.Errorf("an oversized write: %v, want bad input", err)
			}
			if res := execOK(t, s, sandbox.Exec{Argv: []string{"echo", "still"}}); string(res.Stdout) != "still\n" {
				t.Errorf("an exec after the writes: %+v", res)
			}
		})
	}
}
