package sandboxtest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// RunSession runs the session cases against b, whose sandboxes must
// implement sandbox.Session: each case prepares a sandbox, opens a session
// in it, and destroys it. opt.Skip applies as in Run.
func RunSession(t *testing.T, b sandbox.Backend, opt Options) {
	runCases(t, b, opt, []testCase[sandbox.Session]{
		{"FilesPersistAcrossExecs", caseSessionPersists},
		{"ExecEnvDirStdin", caseSessionExecInputs},
		{"ExecOutputCap", caseSessionOutputCap},
		{"TimeoutKeepsSession", caseSessionTimeout},
		{"LeftoversSwept", caseSessionSwept},
		{"FileErrors", caseSessionFileErrors},
	}, func(t *testing.T, opt Options) sandbox.Session { return openSession(t, b, opt) })
}

// openSession prepares a sandbox of b and opens a session in it, with a
// 10 s wall per exec; the test's cleanup destroys it.
func openSession(t *testing.T, b sandbox.Backend, opt Options) sandbox.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := b.Prepare(ctx, opt.Template)
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(context.Background()); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	s, ok := sb.(sandbox.Session)
	if !ok {
		t.Fatalf("%s sandboxes do not implement sandbox.Session", b.Name())
	}
	c := &sandbox.Claim{ID: sandbox.NewID(), Tenant: "conformance", Image: opt.Image,
		Policy: sandbox.Policy{Trust: opt.Trust}, Limits: sandbox.Limits{Wall: 10 * time.Second}}
	if err := s.Open(ctx, c); err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func mustExec(t *testing.T, s sandbox.Session, e sandbox.Exec) *sandbox.Result {
	t.Helper()
	if e.Env == nil {
		e.Env = []string{"PATH=/usr/bin:/bin"}
	}
	res, err := s.Exec(context.Background(), &e)
	if err != nil {
		t.Fatalf("exec %q: %v", e.Argv, err)
	}
	return res
}

func mustFile(t *testing.T, s sandbox.Session, op sandbox.FileOp) *sandbox.FileReply {
	t.Helper()
	fr, err := s.File(context.Background(), &op)
	if err != nil {
		t.Fatalf("file %s %s: %v", op.Op, op.Path, err)
	}
	return fr
}

// caseSessionPersists: an uploaded script runs, what it writes the next
// exec reads and a download returns, and the listing shows both.
func caseSessionPersists(t *testing.T, s sandbox.Session) {
	script := []byte("echo hello $1 > out.txt\ncat out.txt\n")
	mustFile(t, s, sandbox.FileOp{Op: sandbox.FileWrite, Path: "main.sh", Data: script, Mode: 0o755})
	if res := mustExec(t, s, sandbox.Exec{Argv: []string{"sh", "main.sh", "one"}}); string(res.Stdout) != "hello one\n" || res.ExitCode != 0 || res.Class != sandbox.OK {
		t.Fatalf("first exec: %+v", res)
	}
	if res := mustExec(t, s, sandbox.Exec{Argv: []string{"cat", "out.txt"}}); string(res.Stdout) != "hello one\n" {
		t.Fatalf("second exec sees %q", res.Stdout)
	}
	if got := mustFile(t, s, sandbox.FileOp{Op: sandbox.FileRead, Path: "out.txt"}).Data; string(got) != "hello one\n" {
		t.Fatalf("download %q", got)
	}
	var names []string
	for _, e := range mustFile(t, s, sandbox.FileOp{Op: sandbox.FileList}).Entries {
		names = append(names, e.Path+":"+e.Type)
	}
	if !slices.Equal(names, []string{"main.sh:file", "out.txt:file"}) {
		t.Fatalf("list %v", names)
	}
	st := mustFile(t, s, sandbox.FileOp{Op: sandbox.FileStat, Path: "main.sh"}).Entries
	if len(st) != 1 || st[0].Mode != 0o755 || st[0].Size != int64(len(script)) {
		t.Fatalf("stat %+v", st)
	}
}

// caseSessionExecInputs: each exec's env is its own (nothing inherited),
// dir is below the workspace, stdin reaches it.
func caseSessionExecInputs(t *testing.T, s sandbox.Session) {
	mustFile(t, s, sandbox.FileOp{Op: sandbox.FileWrite, Path: "sub/x", Data: []byte("x")})
	res := mustExec(t, s, sandbox.Exec{Argv: []string{"sh", "-c", "echo $FOO; pwd; cat"}, Env: []string{"PATH=/usr/bin:/bin", "FOO=bar"}, Dir: "sub", Stdin: []byte("in\n")})
	if string(res.Stdout) != "bar\n"+sandbox.WorkspaceDir+"/sub\nin\n" {
		t.Fatalf("env, dir and stdin: %q", res.Stdout)
	}
	if res := mustExec(t, s, sandbox.Exec{Argv: []string{"sh", "-c", "echo ${FOO:-unset}"}}); string(res.Stdout) != "unset\n" {
		t.Fatalf("the next exec inherited %q", res.Stdout)
	}
}

func caseSessionOutputCap(t *testing.T, s sandbox.Session) {
	res := mustExec(t, s, sandbox.Exec{Argv: []string{"sh", "-c", "echo 0123456789"}, Output: 4})
	if string(res.Stdout) != "0123" || !res.StdoutTruncated {
		t.Fatalf("output cap: %q truncated=%v", res.Stdout, res.StdoutTruncated)
	}
}

// caseSessionTimeout: an exec past its wall ends as a timeout, and the
// session takes the next one.
func caseSessionTimeout(t *testing.T, s sandbox.Session) {
	if res := mustExec(t, s, sandbox.Exec{Argv: []string{"sleep", "5"}, Wall: 300 * time.Millisecond}); res.Class != sandbox.Timeout {
		t.Fatalf("sleep past its wall: %+v", res)
	}
	if res := mustExec(t, s, sandbox.Exec{Argv: []string{"echo", "next"}}); string(res.Stdout) != "next\n" {
		t.Fatalf("after the timeout: %+v", res)
	}
}

// caseSessionSwept: a process that left the exec's process group and
// session is gone when the next exec looks (the sandbox's own /proc).
func caseSessionSwept(t *testing.T, s sandbox.Session) {
	script := `setsid sh -c 'echo $$ >.pid; exec sleep 600' </dev/null >/dev/null 2>&1 &
while [ ! -s .pid ]; do :; done; echo started`
	if res := mustExec(t, s, sandbox.Exec{Argv: []string{"sh", "-c", script}}); string(res.Stdout) != "started\n" {
		t.Fatalf("leftover: %+v", res)
	}
	res := mustExec(t, s, sandbox.Exec{Argv: []string{"sh", "-c", "cat /proc/[0-9]*/comm"}})
	if slices.Contains(strings.Fields(string(res.Stdout)), "sleep") {
		t.Fatalf("the last exec's sleep is still there (processes: %q)", res.Stdout)
	}
}

// caseSessionFileErrors: a missing file is NotFound, an escape BadInput,
// both naming the path, and neither changes the workspace.
func caseSessionFileErrors(t *testing.T, s sandbox.Session) {
	mustExec(t, s, sandbox.Exec{Argv: []string{"ln", "-s", "/etc/passwd", "pw"}})
	ctx := context.Background()
	for _, c := range []struct {
		op    sandbox.FileOp
		class sandbox.Class
	}{
		{sandbox.FileOp{Op: sandbox.FileRead, Path: "nope"}, sandbox.NotFound},
		{sandbox.FileOp{Op: sandbox.FileRead, Path: "pw"}, sandbox.BadInput},
		{sandbox.FileOp{Op: sandbox.FileWrite, Path: "pw/x", Data: []byte("x")}, sandbox.BadInput},
		{sandbox.FileOp{Op: sandbox.FileRemove, Path: "nope"}, sandbox.NotFound},
		{sandbox.FileOp{Op: sandbox.FileRead, Path: "../x"}, sandbox.BadInput},
	} {
		if _, err := s.File(ctx, &c.op); sandbox.ClassOf(err) != c.class || sandbox.FieldOf(err) != "path" {
			t.Errorf("%s %s: %v, want %s on path", c.op.Op, c.op.Path, err, c.class)
		}
	}
	if res := mustExec(t, s, sandbox.Exec{Argv: []string{"ls"}}); string(res.Stdout) != "pw\n" {
		t.Fatalf("the workspace after the refusals: %q", res.Stdout)
	}
}
