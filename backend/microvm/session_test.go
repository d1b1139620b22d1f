package microvm

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/sandbox"
)

func sessionClaim(tenant string) *sandbox.Claim {
	return &sandbox.Claim{ID: "s1", Tenant: tenant, Policy: sandbox.Policy{Trust: sandbox.Hostile},
		Limits: sandbox.Limits{Wall: 30 * time.Second, Output: 1 << 20}}
}

// countProcs is an exec that counts the guest's processes whose command
// line is argv, exactly: never the exec's own, nor a shell's fork on its
// way to exec.
func countProcs(t *testing.T, ss sandbox.Session, argv ...string) string {
	t.Helper()
	script := `n=0; for d in /proc/[0-9]*; do if [ "$(tr '\0' ' ' < $d/cmdline 2>/dev/null)" = "$WANT" ]; then n=$((n+1)); fi; done; echo $n`
	res, err := ss.Exec(context.Background(), &sandbox.Exec{Argv: []string{"/bin/sh", "-c", script}, Env: []string{"WANT=" + strings.Join(argv, " ") + " "}})
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(res.Stdout))
}

// TestSessionInGuest is issue 21 on the microVM: a session in one warm VM
// keeps its files between execs, streams an exec's output as the guest
// produces it, sweeps what an exec leaves but spares a background process
// (whose stdin takes writes), confines file operations to the workspace,
// pauses whole (its background process keeps running through the pause),
// resumes for its tenant only, and leaves nothing on the host.
func TestSessionInGuest(t *testing.T) {
	b := sibling(t, backend(t), func(c *Config) { c.Warm = true })
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sb, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(context.WithoutCancel(ctx))
	ss := sb.(sandbox.Session)
	if _, err := sb.(sandbox.Processes).Processes(ctx); sandbox.ClassOf(err) != sandbox.BadInput {
		t.Fatalf("processes before Open: %v", err)
	}
	if err := ss.Open(ctx, sessionClaim("acme")); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Run(ctx, inv("/bin/true")); err == nil {
		t.Fatal("a session's VM ran an invocation")
	}
	if err := ss.Open(ctx, sessionClaim("acme")); sandbox.ClassOf(err) != sandbox.BackendFailure {
		t.Fatalf("a second Open: %v", err)
	}

	// Files persist between execs and file operations see the execs' files.
	if _, err := ss.File(ctx, &sandbox.FileOp{Op: sandbox.FileWrite, Path: "src/main.sh", Data: []byte("echo one; sleep 0.3; echo two >&2; echo three\n"), Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var chunks []sandbox.Chunk
	var firstAt time.Time
	live := sandbox.WithOutput(ctx, func(c sandbox.Chunk) {
		mu.Lock()
		defer mu.Unlock()
		if firstAt.IsZero() {
			firstAt = time.Now()
		}
		chunks = append(chunks, c)
	})
	res, err := ss.Exec(live, &sandbox.Exec{Argv: []string{"/bin/sh", "main.sh"}, Dir: "src"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Class != sandbox.OK || res.ExitCode != 0 || string(res.Stdout) != "one\nthree\n" || string(res.Stderr) != "two\n" {
		t.Fatalf("exec: %+v", res)
	}
	mu.Lock()
	var out, errs bytes.Buffer
	for _, c := range chunks {
		map[sandbox.Stream]*bytes.Buffer{sandbox.Stdout: &out, sandbox.Stderr: &errs}[c.Stream].Write(c.Data)
	}
	streamedEarly := !firstAt.IsZero() && res.Timings.Finished.Sub(firstAt) > 200*time.Millisecond
	mu.Unlock()
	if out.String() != "one\nthree\n" || errs.String() != "two\n" || len(chunks) < 3 {
		t.Fatalf("streamed %d chunks: stdout %q stderr %q", len(chunks), out.String(), errs.String())
	}
	if !streamedEarly {
		t.Errorf("the first chunk came at %v, the exec ended at %v: not streamed while it ran", firstAt, res.Timings.Finished)
	}
	if res, err := ss.Exec(ctx, &sandbox.Exec{Argv: []string{"/bin/sh", "-c", "echo made > made.txt; ln -s / escape"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %v %+v", err, res)
	}
	if fr, err := ss.File(ctx, &sandbox.FileOp{Op: sandbox.FileRead, Path: "made.txt"}); err != nil || string(fr.Data) != "made\n" {
		t.Fatalf("read made.txt: %v %+v", err, fr)
	}
	if _, err := ss.File(ctx, &sandbox.FileOp{Op: sandbox.FileRead, Path: "escape/etc/hostname"}); sandbox.ClassOf(err) != sandbox.BadInput {
		t.Fatalf("read through a symlink out of the workspace: %v", err)
	}
	if _, err := ss.File(ctx, &sandbox.FileOp{Op: sandbox.FileRead, Path: "nope"}); sandbox.ClassOf(err) != sandbox.NotFound {
		t.Fatalf("read a missing file: %v", err)
	}
	if _, err := ss.File(ctx, &sandbox.FileOp{Op: sandbox.FileRead, Path: "../etc/passwd"}); sandbox.ClassOf(err) != sandbox.BadInput {
		t.Fatalf("read ..: %v", err)
	}

	// A background process survives later execs; what an exec leaves
	// behind (even in a session of its own) does not.
	procs := sb.(sandbox.Processes)
	bgp, err := procs.Start(ctx, &sandbox.Exec{ID: "ticker", Argv: []string{"/bin/sh", "-c", "sleep 4321 & while :; do echo tick; sleep 0.2; done"}, Background: true})
	if err != nil || !bgp.Running || bgp.Pid <= 1 {
		t.Fatalf("start: %v %+v", err, bgp)
	}
	cat, err := procs.Start(ctx, &sandbox.Exec{ID: "cat", Argv: []string{"cat"}, Background: true, OpenStdin: true})
	if err != nil || !cat.Running {
		t.Fatalf("start cat: %v %+v", err, cat)
	}
	if res, err := ss.Exec(ctx, &sandbox.Exec{Argv: []string{"/bin/sh", "-c", "setsid sleep 1234 & sleep 1234 & echo left"}}); err != nil || string(res.Stdout) != "left\n" {
		t.Fatalf("leaving processes: %v %+v", err, res)
	}
	if n := countProcs(t, ss, "sleep", "1234"); n != "0" {
		t.Errorf("%s processes an exec left survive it", n)
	}
	if n := countProcs(t, ss, "sleep", "4321"); n != "1" {
		t.Errorf("the background process: %s running, want 1", n)
	}
	if n, err := sb.(sandbox.StdinWriter).WriteStdin(ctx, "cat", []byte("hello\n"), false); err != nil || n != 6 {
		t.Fatalf("write stdin: %d %v", n, err)
	}
	if _, err := sb.(sandbox.StdinWriter).WriteStdin(ctx, "nope", []byte("x"), false); sandbox.ClassOf(err) != sandbox.NotFound {
		t.Fatalf("write to an unknown process: %v", err)
	}
	if _, err := procs.Process(ctx, "nope"); sandbox.ClassOf(err) != sandbox.NotFound {
		t.Fatalf("an unknown process: %v", err)
	}

	// Pause whole, then resume: another tenant is refused and changes
	// nothing; the tenant finds its files and its processes, still going.
	pz := sb.(sandbox.Pauser)
	if _, err := pz.Pause(ctx, "globex"); !errors.Is(err, sandbox.ErrWrongTenant) {
		t.Fatalf("another tenant paused the session: %v", err)
	}
	before, err := procs.Process(ctx, "ticker")
	if err != nil {
		t.Fatal(err)
	}
	p, err := pz.Pause(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Discard(context.WithoutCancel(ctx), p)
	t.Logf("paused: %d bytes saved", p.Bytes)
	if _, err := ss.Exec(ctx, &sandbox.Exec{Argv: []string{"true"}}); sandbox.ClassOf(err) != sandbox.BackendFailure {
		t.Fatalf("an exec in a paused VM: %v", err)
	}
	sb.Destroy(ctx)
	if _, err := b.Resume(ctx, p, "globex"); !errors.Is(err, sandbox.ErrWrongTenant) {
		t.Fatalf("globex resumed acme's session: %v", err)
	}
	started := time.Now()
	r, err := b.Resume(ctx, p, "acme")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Destroy(context.WithoutCancel(ctx))
	rs := r.(sandbox.Session)
	other := sessionClaim("acme")
	other.Limits.Output = 2 << 20
	if err := rs.Open(ctx, other); sandbox.ClassOf(err) != sandbox.BadInput {
		t.Fatalf("a resume claimed with other limits: %v", err)
	}
	if err := rs.Open(ctx, sessionClaim("acme")); err != nil {
		t.Fatal(err)
	}
	res, err = rs.Exec(ctx, &sandbox.Exec{Argv: []string{"cat", "made.txt"}})
	if err != nil || string(res.Stdout) != "made\n" {
		t.Fatalf("after resume: %v %+v", err, res)
	}
	t.Logf("resume to the first exec's result: %v", time.Since(started))
	time.Sleep(500 * time.Millisecond)
	after, err := r.(sandbox.Processes).Process(ctx, "ticker")
	if err != nil || !after.Running || after.Pid != bgp.Pid || len(after.Stdout) <= len(before.Stdout) {
		t.Fatalf("the background process after resume: %v %+v (before: %d bytes)", err, after, len(before.Stdout))
	}
	if n, err := r.(sandbox.StdinWriter).WriteStdin(ctx, "cat", []byte("again\n"), true); err != nil || n != 6 {
		t.Fatalf("write stdin after resume: %d %v", n, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := r.(sandbox.Processes).Process(ctx, "cat")
		if err != nil {
			t.Fatal(err)
		}
		if !c.Running {
			if string(c.Stdout) != "hello\nagain\n" || c.ExitCode != 0 {
				t.Fatalf("cat ended: %+v", c)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cat still running after its stdin closed: %+v", c)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if k, err := r.(sandbox.Processes).Kill(ctx, "ticker"); err != nil || !k.Killed {
		t.Fatalf("kill: %v %+v", err, k)
	}
	if n := countProcs(t, rs, "sleep", "4321"); n != "0" {
		t.Errorf("the killed background process: %s still running", n)
	}
	r.Destroy(ctx)
	assertClean(t, b, "wovyr-vm-")
}

// TestTenantBoundSnapshotRow runs BATTERY 98 on the microVM through
// battery.Run: another tenant's resume of a paused session's VM is refused
// and changes nothing, its tenant's finds its canary; the control (a
// resume for whoever asks) is flagged.
func TestTenantBoundSnapshotRow(t *testing.T) {
	for _, o := range runRows(t, Suite(backend(t), battery.Suite{}), 98) {
		t.Logf("row %d: %s | control: %s", o.ID, o.Observed, o.ControlObserved)
	}
}
