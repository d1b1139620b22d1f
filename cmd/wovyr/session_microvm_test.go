package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/backend/microvm"
	"github.com/wovyr/wovyr/internal/vmtest"
	"github.com/wovyr/wovyr/sandbox"
)

// vmEnv is the microVM image this package's tests boot, built once.
var vmEnv vmtest.Builder

// TestSessionCLIMicroVM: the session commands on the microVM, as a user
// types them: a hostile tenant's session lands on its floor, takes a file,
// runs it with a background process, pauses by snapshot and resumes on the
// next exec with its file and process, and ends.
func TestSessionCLIMicroVM(t *testing.T) {
	e := vmEnv.Get(t)
	url := daemonOver(t, func(dir string) []sandbox.Backend {
		state := filepath.Join(dir, "microvm")
		if err := os.Mkdir(state, 0o700); err != nil {
			t.Fatal(err)
		}
		b, err := microvm.New(microvm.Config{StateDir: state, ImageDir: e.Image.Dir, Warm: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Reconcile(context.Background()) })
		return []sandbox.Backend{b}
	}, nil)
	local := filepath.Join(t.TempDir(), "main.sh")
	if err := os.WriteFile(local, []byte("echo hi from $(hostname)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := sessionCLI(t, url)
	id, errs, code := run("create", "--trust", "hostile", "--idle-timeout", "5m")
	id = strings.TrimSpace(id)
	if code != 0 || len(id) != 32 {
		t.Fatalf("create: %q %q %d", id, errs, code)
	}
	defer run("rm", id)
	var eid string
	for _, s := range []struct {
		args           []string
		stdout, stderr string
		code           int
	}{
		{[]string{"cp", local, id + ":main.sh"}, "", "", 0},
		{[]string{"exec", id, "--", "sh", "main.sh"}, "hi from wovyr\n", "", 0},
		{[]string{"exec", "--background", id, "--", "sh", "-c", "sleep 300"}, "", "", 0},
		{[]string{"exec", id, "--", "sh", "-c", "echo $(cat main.sh | wc -c) >&2; exit 4"}, "", "25\n", 4},
	} {
		out, errs, code := run(s.args...)
		if s.args[1] == "--background" {
			eid, out = strings.TrimSpace(out), "" // the process's exec id
		}
		if out != s.stdout || errs != s.stderr || code != s.code {
			t.Fatalf("wovyr session %v: stdout %q stderr %q exit %d, want %q %q %d", s.args, out, errs, code, s.stdout, s.stderr, s.code)
		}
	}
	if out, _, code := run("ls"); code != 0 || !strings.Contains(out, id+"  microvm  running") {
		t.Fatalf("ls of sessions: %d %q", code, out)
	}
	// ps: the background process's exec id, pid and state.
	ps := func() string {
		t.Helper()
		out, errs, code := run("ps", id)
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[0] == eid {
				return f[1] + " " + f[2]
			}
		}
		t.Fatalf("ps has no %s: %q %q %d", eid, out, errs, code)
		return ""
	}
	before := ps()
	if !strings.HasSuffix(before, " running") {
		t.Fatalf("the background process before the pause: %s", before)
	}
	out, errs, code := run("pause", id)
	if !regexp.MustCompile(`^`+id+` paused \(resume: snapshot, [1-9][0-9]* bytes kept\)\n$`).MatchString(out) || code != 0 {
		t.Fatalf("pause: %q %q %d", out, errs, code)
	}
	// The next exec resumes it: the file and the background process are there.
	if out, errs, code := run("exec", id, "--", "cat", "main.sh"); code != 0 || out != "echo hi from $(hostname)\n" {
		t.Fatalf("exec after the pause: %q %q %d", out, errs, code)
	}
	if after := ps(); after != before {
		t.Fatalf("the background process after the resume: %s, before the pause %s", after, before)
	}
	if _, errs, code := run("rm", id); code != 0 || errs != "" {
		t.Fatalf("rm: %q %d", errs, code)
	}
	if _, errs, code := run("exec", id, "--", "true"); code != exitBadInput || errs != "wovyr: conflict (id): session "+id+" has ended (ended: deleted)\n" {
		t.Fatalf("exec on the deleted session: %q %d", errs, code)
	}
}
