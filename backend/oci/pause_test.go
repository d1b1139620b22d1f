package oci

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// pauseClaim is the claim of the sessions paused here.
func pauseClaim(tenant string) *sandbox.Claim {
	return &sandbox.Claim{ID: "sess-pause", Tenant: tenant, Image: "busybox", Policy: sandbox.Policy{Trust: sandbox.Trusted},
		Limits: sandbox.Limits{Wall: 10 * time.Second}}
}

// counter is a background loop that writes its count to ./count.
var counter = []string{"sh", "-c", `i=0; while :; do i=$((i+1)); echo $i > .count; mv .count count; sleep 0.02; done`}

// assertCarriesOn checks that the counter started as pid, which had
// counted to before at the pause, is alive in the resumed s and counting
// on from there.
func assertCarriesOn(t *testing.T, s *Sandbox, pid, before int) {
	t.Helper()
	if got := alive(t, s, pid); got != "alive" {
		t.Fatalf("the counter (pid %d) after resume: %s", pid, got)
	}
	after := count(t, s)
	time.Sleep(200 * time.Millisecond)
	if later := count(t, s); after < before || later <= after {
		t.Errorf("counter %d before the pause, %d and %d after: it did not carry on", before, after, later)
	}
}

func count(t *testing.T, s *Sandbox) int {
	t.Helper()
	res := execOK(t, s, sandbox.Exec{Argv: []string{"cat", "count"}})
	n, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	if err != nil {
		dbg := execOK(t, s, sandbox.Exec{Argv: []string{"sh", "-c", "ls -la; ps"}})
		t.Fatalf("count %q (%q): %v\n%s%s", res.Stdout, res.Stderr, err, dbg.Stdout, dbg.Stderr)
	}
	return n
}

// TestGVisorPauseResume: a gVisor session sandbox checkpointed by Pause
// and restored by Resume has its files as they were — contents, modes,
// owners, a directory, a template file it deleted still deleted — and its
// background process: the same pid, alive, still counting from where it
// was. The pause is its tenant's alone: another tenant can neither pause
// the sandbox nor resume the paused copy, and a refusal changes nothing.
// The paused sandbox leaves nothing on the host but its own 0700
// directory of 0600 files, kept through the resume until Discard.
func TestGVisorPauseResume(t *testing.T) {
	b := newBackends(t)["gvisor"]
	ctx := context.Background()
	s := openSessionFor(t, b, pauseClaim("acme"))
	if res := execOK(t, s, sandbox.Exec{Argv: []string{"sh", "-c",
		`echo 'print(42)' > main.py && chmod 0751 main.py && mkdir -p lib/deep && echo x > lib/deep/f && rm /etc/group`}}); res.ExitCode != 0 {
		t.Fatalf("setting up the workspace: %+v", res)
	}
	bg := startOK(t, s, sandbox.Exec{ID: "counter", Argv: counter})
	time.Sleep(200 * time.Millisecond)
	before := count(t, s)

	if _, err := s.Pause(ctx, "globex"); !errors.Is(err, sandbox.ErrWrongTenant) {
		t.Fatalf("another tenant's pause: %v, want ErrWrongTenant", err)
	}
	if got := alive(t, s, bg.Pid); got != "alive" {
		t.Fatalf("after a refused pause the counter is %s", got)
	}
	p, err := s.Pause(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Discard(ctx, p) })
	if _, err := s.Exec(ctx, &sandbox.Exec{Argv: []string{"true"}}); sandbox.ClassOf(err) != sandbox.BackendFailure {
		t.Errorf("exec in a paused sandbox: %v, want a backend failure", err)
	}
	if err := s.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	assertNoLeftovers(t, b, s)
	dir := filepath.Join(snapshotsDir(b.cfg.StateDir), "paused", "gvisor", p.ID)
	assertPrivate(t, dir)
	listed, err := b.PausedSandboxes(ctx)
	if err != nil || !containsPaused(listed, p) {
		t.Fatalf("PausedSandboxes: %v %v, want %v among them", listed, err, p)
	}

	if _, err := b.Resume(ctx, p, "globex"); !errors.Is(err, sandbox.ErrWrongTenant) || sandbox.ClassOf(err) != sandbox.BadInput {
		t.Fatalf("another tenant's resume: %v, want ErrWrongTenant (bad input)", err)
	}
	assertPrivate(t, dir)
	sb, err := b.Resume(ctx, p, "acme")
	if err != nil {
		t.Fatal(err)
	}
	r := sb.(*Sandbox)
	t.Cleanup(func() {
		if err := r.Destroy(ctx); err != nil {
			t.Error(err)
		}
		assertNoLeftovers(t, b, r)
	})
	assertPrivate(t, dir) // until the session's resume is durable
	if err := b.Discard(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the paused copy outlives its Discard: %v", err)
	}
	if err := r.Open(ctx, pauseClaim("acme")); err != nil {
		t.Fatal(err)
	}
	res := execOK(t, r, sandbox.Exec{Argv: []string{"sh", "-c",
		`cat main.py; stat -c '%a %u' main.py; stat -c '%u:%g' lib/deep/f; cat lib/deep/f; test -e /etc/group && echo group || echo no-group; test -e /etc/passwd && echo passwd`}})
	if want := "print(42)\n751 0\n0:0\nx\nno-group\npasswd\n"; string(res.Stdout) != want {
		t.Errorf("files after resume:\n%s\nwant:\n%s (stderr %q)", res.Stdout, want, res.Stderr)
	}
	assertCarriesOn(t, r, bg.Pid, before)
	ps, err := r.Processes(ctx)
	if err != nil || len(ps) != 1 || ps[0].ID != "counter" || !ps[0].Running || ps[0].Pid != bg.Pid {
		t.Errorf("processes after resume: %+v %v, want the counter running as pid %d", ps, err, bg.Pid)
	}
}

// TestPauseNeedsACheckpoint: runc's sandbox cannot checkpoint, says
// ErrNoSnapshot and runs on.
func TestPauseNeedsACheckpoint(t *testing.T) {
	b := newBackends(t)["container"]
	s := openSessionFor(t, b, pauseClaim("acme"))
	if _, err := s.Pause(context.Background(), "acme"); !errors.Is(err, sandbox.ErrNoSnapshot) {
		t.Fatalf("pause on container: %v, want ErrNoSnapshot", err)
	}
	if res := execOK(t, s, sandbox.Exec{Argv: []string{"echo", "on"}}); string(res.Stdout) != "on\n" {
		t.Errorf("after a refused pause: %+v", res)
	}
}

func containsPaused(list []sandbox.Paused, p sandbox.Paused) bool {
	for _, q := range list {
		if q.Backend == p.Backend && q.ID == p.ID {
			return true
		}
	}
	return false
}

// assertPrivate checks dir is root's 0700 and its files root's 0600.
func assertPrivate(t *testing.T, dir string) {
	t.Helper()
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("paused directory: %v %v, want 0700", fi, err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) < 3 {
		t.Errorf("paused directory holds %d files, want the image, the upper layer and the record", len(ents))
	}
	for _, e := range ents {
		fi, err := os.Lstat(filepath.Join(dir, e.Name()))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want a 0600 file", e.Name(), fi.Mode(), err)
		}
	}
}
