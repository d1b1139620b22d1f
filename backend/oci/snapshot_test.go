package oci

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/snapshot"
	"github.com/wovyr/wovyr/snapshot/snapshottest"
)

// privateState is a state directory of the test's own, searchable by the
// sandboxes' uids (t.TempDir's parent is 0700), reconciled and removed
// when the test ends, whatever it left.
func privateState(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := Reconcile(context.Background(), dir); err != nil {
			t.Error(err)
		}
		os.RemoveAll(dir)
	})
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}

// snapBackend is a pooled gVisor backend on a state directory of its own
// (goldens are written there), reading the shared test templates.
func snapBackend(t testing.TB) *Backend {
	t.Helper()
	dir := privateState(t, "wovyr-gsnap-")
	if err := os.Symlink(filepath.Join(testState, "images"), filepath.Join(dir, "images")); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.StateDir, cfg.Pooled, cfg.Snapshots = dir, true, true
	b, err := NewGVisor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c := b.Probe(context.Background()); !c.Available {
		t.Fatal(c.Reason)
	}
	return b
}

// identityScript prints, one per line: boot_id, machine-id, 16 urandom
// bytes (the Sentry has no /proc/sys/kernel/random/uuid), the hostname, the wall clock (s), the process count
// and what a previous tenant could have left (files, a child process, env).
const identityScript = `cat /proc/sys/kernel/random/boot_id /etc/machine-id
head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; echo
hostname
date +%s
n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo $n
echo "files:$(ls -A /workspace /tmp | grep -v ':$' | grep .)"; ps -o args | grep -c '[s]leep 7777'; echo "env:$CANARY"`

// TestGVisorCloneIsItsOwnAndCarriesNothing is invariant 4 for gVisor
// clones (BATTERY rows 85–89): clones of one golden differ in RNG,
// identity and the agent's own PRNG, keep the host's clock, start with the
// golden's process set and see nothing a tenant of an earlier clone left in
// files, env or processes; the golden's files stay private and unchanged.
func TestGVisorCloneIsItsOwnAndCarriesNothing(t *testing.T) {
	b := snapBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tmpl := sandbox.Template{Kind: sandbox.KindCommand}
	sg, err := b.Golden(ctx, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	g := sg.(*golden)
	snapshottest.AssertPrivate(t, g.disk.Dir, checkpointImage, "meta.json", "pages.img", "pages_meta.img")
	before := digestFiles(t, g.disk.Dir)
	if again, err := b.Golden(ctx, tmpl); err != nil || again != sg {
		t.Fatalf("second Golden: %v, %v; want the same golden", again, err)
	}

	// Tenant A leaves a canary everywhere it can and keeps a child alive.
	a := snapshottest.Clone(t, b, sg)
	res := runScript(t, a, `echo canary > /workspace/left; echo canary > /tmp/left; export CANARY=1; setsid sleep 7777 & echo done`)
	if strings.TrimSpace(string(res.Stdout)) != "done" {
		t.Fatalf("tenant A: %q %q", res.Stdout, res.Stderr)
	}

	var facts [][]string
	rands := map[uint64]int{}
	for i := range 3 {
		c := snapshottest.Clone(t, b, sg)
		s := c.(*Sandbox)
		res := runScript(t, c, identityScript)
		lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
		if len(lines) != 9 {
			t.Fatalf("clone %d: %q (stderr %q)", i, res.Stdout, res.Stderr)
		}
		facts = append(facts, lines)
		if lines[0] != s.boot.ident.BootID || lines[1] != s.boot.ident.MachineID {
			t.Errorf("clone %d reads boot_id %q machine-id %q, want its own %+v", i, lines[0], lines[1], s.boot.ident)
		}
		if lines[3] != sandbox.Hostname {
			t.Errorf("clone %d hostname %q, want %q on every tier", i, lines[3], sandbox.Hostname)
		}
		sec, err := strconv.ParseInt(lines[4], 10, 64)
		if err != nil {
			t.Fatalf("clone %d clock %q: %v", i, lines[4], err)
		}
		if sec < res.Timings.Started.Unix() || sec > res.Timings.Finished.Unix() {
			t.Errorf("clone %d clock %d s is outside the run (%s–%s)", i, sec, res.Timings.Started, res.Timings.Finished)
		}
		if rest := strings.Join(lines[6:], "\n"); rest != "files:\n0\nenv:" {
			t.Errorf("clone %d sees another tenant's residue: %q", i, rest)
		}
		th := s.boot.thawed
		if th == nil || th.PID != 1 {
			t.Fatalf("clone %d thaw: %+v, want the agent re-executed as pid 1", i, th)
		}
		if j, dup := rands[th.Rand]; dup {
			t.Errorf("clones %d and %d share their agent's PRNG state (%d)", j, i, th.Rand)
		}
		rands[th.Rand] = i
		if err := c.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
		assertNoLeftovers(t, b, s)
	}
	for field, name := range []string{"boot_id", "machine-id", "urandom"} {
		seen := map[string]int{}
		for i, f := range facts {
			if j, dup := seen[f[field]]; dup {
				t.Errorf("clones %d and %d share their %s %q", j, i, name, f[field])
			}
			seen[f[field]] = i
		}
	}
	if facts[0][5] != "2" || facts[1][5] != "2" || facts[2][5] != "2" {
		t.Errorf("clones start with other processes than the golden's agent: %s, %s, %s", facts[0][5], facts[1][5], facts[2][5])
	}
	a.Destroy(ctx)
	assertNoLeftovers(t, b, a.(*Sandbox))
	if after := digestFiles(t, g.disk.Dir); after != before {
		t.Fatal("the golden changed while clones ran")
	}
}

// TestGVisorCloneEgressDenied is invariant 2 after restore: a clone has no
// network but loopback, and a connection out fails exactly as it does from
// a cold sandbox. 192.0.2.1 is TEST-NET-1; nothing leaves the Sentry.
// (runsc 0.0~20240729 answered EHOSTUNREACH; the pinned build of ADR 0023
// answers ENETUNREACH, as a container without routes does.)
func TestGVisorCloneEgressDenied(t *testing.T) {
	b := snapBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const probe = `cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '; nc -w 2 192.0.2.1 80 </dev/null 2>&1; echo "exit $?"`
	cold, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	defer cold.Destroy(ctx)
	sg, err := b.Golden(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	const want = "lo\nnc: can't connect to remote host (192.0.2.1): Network is unreachable\nexit 1"
	for name, s := range map[string]sandbox.Sandbox{"cold": cold, "clone": snapshottest.Clone(t, b, sg)} {
		if got := strings.TrimSpace(string(runScript(t, s, probe).Stdout)); got != want {
			t.Errorf("%s sandbox: %q, want %q", name, got, want)
		}
	}
}

// TestGVisorGoldenIsVoidedByItsKey: a golden of another configuration is
// never restored, and the reconcile that follows a probe removes it.
func TestGVisorGoldenIsVoidedByItsKey(t *testing.T) {
	b := snapBackend(t)
	store, err := b.snapshots()
	if err != nil {
		t.Fatal(err)
	}
	tmpl := sandbox.Template{Kind: sandbox.KindCommand}
	d, err := b.chosen(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	old, err := b.goldenKey(d, b.cfg.DefaultImage, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	old.ConfigHash = "another"
	build, err := store.Begin(old)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := build.Commit(); err != nil {
		t.Fatal(err)
	}
	if c := b.Probe(context.Background()); !c.Available {
		t.Fatal(c.Reason)
	}
	if _, err := store.Find(old); err != snapshot.ErrNotFound {
		t.Fatalf("stale golden still found after a probe: %v", err)
	}
	_, err = b.Restore(context.Background(), &golden{key: old, tmpl: tmpl})
	if sandbox.ClassOf(err) != sandbox.BackendFailure || !strings.Contains(err.Error(), "gvisor: golden snapshot "+old.ID()+" is stale") {
		t.Fatalf("restore of a stale golden: %v", err)
	}
}

// TestGVisorFailedRestoreLeavesNothing: a clone whose image is damaged
// fails with a typed error, marks nothing else, and leaves no process,
// cgroup, mount or scratch behind.
func TestGVisorFailedRestoreLeavesNothing(t *testing.T) {
	b := snapBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sg, err := b.Golden(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	g := sg.(*golden)
	damaged := *g.disk
	damaged.Dir = t.TempDir()
	if err := os.WriteFile(damaged.Path(checkpointImage), []byte("not an image"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := &golden{key: g.key, disk: &damaged, tmpl: g.tmpl, name: g.name}
	_, err = b.Restore(ctx, bad)
	if sandbox.ClassOf(err) != sandbox.BackendFailure {
		t.Fatalf("restore of a damaged image: %v, want a backend failure", err)
	}
	id := regexp.MustCompile(`wovyr-g-[0-9a-f]{12}`).FindString(err.Error())
	if id == "" {
		t.Fatalf("the error names no sandbox: %v", err)
	}
	assertNoLeftovers(t, b, &Sandbox{id: id})
	if ents, _ := os.ReadDir(filepath.Join(b.run, "sb")); len(ents) != 0 {
		t.Errorf("scratch left: %v", ents)
	}
	if !g.Valid() {
		t.Error("a damaged copy voided the real golden")
	}
}

func runScript(t *testing.T, s sandbox.Sandbox, script string) *sandbox.Result {
	t.Helper()
	return snapshottest.Run(t, s, cmd("/bin/sh", "-c", script))
}

// digestFiles hashes every file of dir, by name.
func digestFiles(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(h, e.Name())
		io.Copy(h, f)
		f.Close()
	}
	return string(h.Sum(nil))
}

// TestGVisorSnapshotsAreOptIn: without Config.Snapshots and Pooled, and on
// the container backend, Golden says ErrNoSnapshot and captures nothing.
func TestGVisorSnapshotsAreOptIn(t *testing.T) {
	for _, c := range []struct {
		name              string
		gvisor, pooled, s bool
	}{{"gvisor-pooled", true, true, false}, {"gvisor-one-shot", true, false, true}, {"container", false, true, true}} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Pooled, cfg.Snapshots = c.pooled, c.s
			newB := NewContainer
			if c.gvisor {
				newB = NewGVisor
			}
			b, err := newB(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Golden(context.Background(), sandbox.Template{Kind: sandbox.KindCommand}); !errors.Is(err, sandbox.ErrNoSnapshot) {
				t.Fatalf("Golden: %v, want ErrNoSnapshot", err)
			}
		})
	}
}
