package microvm

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/snapshot"
	"github.com/wovyr/wovyr/snapshot/snapshottest"
)

// identityScript prints, one per line: boot_id, machine-id, a kernel UUID,
// 16 urandom bytes, the hostname, the wall clock (s), the process names
// and what a previous tenant could have left (files, a child process).
const identityScript = `cat /proc/sys/kernel/random/boot_id /etc/machine-id /proc/sys/kernel/random/uuid
head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; echo
hostname
date +%s
` + battery.ProcNames + `
echo "files:$(ls -A /workspace /tmp | grep -v ':$' | grep .)"; ps -o args | grep -c '[s]leep 7777'; echo "env:$CANARY"`

// TestCloneIsItsOwnAndCarriesNothing is invariant 4 for microVM clones
// (BATTERY rows 85–89): clones of one golden differ in RNG and identity,
// keep the host's clock, start with the golden's process set, and see
// nothing a tenant of an earlier clone left in memory, files, env or
// processes; the golden itself stays byte for byte what was captured, its
// RAM sealed, its files private; a clone is never saved.
func TestCloneIsItsOwnAndCarriesNothing(t *testing.T) {
	b := backend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tmpl := sandbox.Template{Kind: sandbox.KindCommand}
	sg, err := b.Golden(ctx, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	g := sg.(*golden)
	if !snapshot.Sealed(g.ram) {
		t.Fatal("golden RAM is not sealed")
	}
	if _, err := g.ram.WriteAt([]byte("x"), 0); err == nil {
		t.Fatal("wrote into the sealed golden RAM")
	}
	snapshottest.AssertPrivate(t, g.disk.Dir, goldenInfo, "meta.json", goldenRAM, goldenScratch, goldenState)
	before := digestGolden(t, g)
	if again, err := b.Golden(ctx, tmpl); err != nil || again != sg {
		t.Fatalf("second Golden: %v, %v; want the same golden", again, err)
	}

	// Tenant A leaves a canary everywhere it can and keeps a child alive.
	a := snapshottest.Clone(t, b, sg)
	res := run(t, a, `echo canary > /workspace/left; echo canary > /tmp/left; export CANARY=1; sleep 7777 & head -c 50000000 /dev/zero | tr '\0' 'C' > /dev/shm/fill 2>/dev/null || true; echo done`)
	if strings.TrimSpace(string(res.Stdout)) != "done" {
		t.Fatalf("tenant A: %q %q", res.Stdout, res.Stderr)
	}
	if err := a.(*vmSandbox).m.Save(ctx, os.Stdout); err == nil {
		t.Fatal("a clone's VM was saved: private RAM must never become a golden")
	}

	var facts [][]string
	for i := range 3 {
		c := snapshottest.Clone(t, b, sg)
		res := run(t, c, identityScript)
		lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
		if len(lines) < 9 {
			t.Fatalf("clone %d: %q (stderr %q)", i, res.Stdout, res.Stderr)
		}
		facts = append(facts, lines)
		if lines[4] != sandbox.Hostname {
			t.Errorf("clone %d hostname %q, want %q on every tier", i, lines[4], sandbox.Hostname)
		}
		// The job's clock to the second (busybox date has no %N); the
		// thaw's to the round trip.
		sec, err := strconv.ParseInt(lines[5], 10, 64)
		if err != nil {
			t.Fatalf("clone %d clock %q: %v", i, lines[5], err)
		}
		if !withinASecond(sec, res.Timings.Started, res.Timings.Finished) {
			t.Errorf("clone %d clock %d s is outside the run (%s–%s)", i, sec, res.Timings.Started, res.Timings.Finished)
		}
		if skew := c.(*vmSandbox).skew; skew > maxClockSkew || skew < -maxClockSkew {
			t.Errorf("clone %d clock is %s off the host's at thaw", i, skew)
		}
		if rest := strings.Join(lines[7:], "\n"); rest != "files:\n0\nenv:" {
			t.Errorf("clone %d sees another tenant's residue: %q", i, rest)
		}
		c.Destroy(context.Background())
	}
	for field, name := range []string{"boot_id", "machine-id", "uuid", "urandom"} {
		seen := map[string]int{}
		for i, f := range facts {
			if j, dup := seen[f[field]]; dup {
				t.Errorf("clones %d and %d share their %s %q", j, i, name, f[field])
			}
			seen[f[field]] = i
		}
	}
	if facts[0][6] != facts[1][6] || facts[1][6] != facts[2][6] {
		t.Errorf("clones start with different processes: %q, %q, %q", facts[0][6], facts[1][6], facts[2][6])
	}
	a.Destroy(context.Background())
	if after := digestGolden(t, g); after != before {
		t.Fatal("the golden changed while clones ran")
	}
}

// TestGoldenIsVoidedByItsKey: a golden of another configuration is never
// restored, and the reconcile that follows a probe removes it.
func TestGoldenIsVoidedByItsKey(t *testing.T) {
	b := backend(t)
	store, err := b.snapshots()
	if err != nil {
		t.Fatal(err)
	}
	p, _ := b.probed(context.Background())
	_, root, _ := b.rootFor(context.Background(), p, "")
	old := b.goldenKey(p, sandbox.Template{Kind: sandbox.KindCommand}, root)
	old.ConfigHash = "another"
	build, err := store.Begin(old)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := build.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := b.reconcileSnapshots(p); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Find(old); err != snapshot.ErrNotFound {
		t.Fatalf("stale golden still found: %v", err)
	}
	if _, err := b.Restore(context.Background(), &golden{key: old, tmpl: sandbox.Template{Kind: sandbox.KindCommand}}); sandbox.ClassOf(err) != sandbox.BackendFailure || !strings.Contains(err.Error(), "stale") {
		t.Fatalf("restore of a stale golden: %v", err)
	}
}

func run(t *testing.T, s sandbox.Sandbox, script string) *sandbox.Result {
	t.Helper()
	return snapshottest.Run(t, s, inv("sh", "-c", script))
}

// digestGolden hashes the golden's files and its sealed RAM.
func digestGolden(t *testing.T, g *golden) string {
	h := sha256.New()
	for _, name := range []string{goldenRAM, goldenState, goldenScratch, goldenInfo} {
		f, err := os.Open(g.disk.Path(name))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(h, f)
		f.Close()
	}
	io.Copy(h, io.NewSectionReader(g.ram, 0, 1<<40))
	return string(h.Sum(nil))
}

// TestClonesAreUnique is BATTERY row 87 at scale: n clones of one golden
// (WOVYR_SOAK_CLONES, default 8; `make soak` runs 100) read boot_id,
// machine-id, a kernel UUID and urandom at 0, 10 and 100 ms into their
// first job, and no two readings anywhere are equal.
func TestClonesAreUnique(t *testing.T) {
	n := snapshottest.SoakClones(t, 8)
	b := backend(t)
	ctx := context.Background()
	g, err := b.Golden(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	const read = `cat /proc/sys/kernel/random/boot_id /etc/machine-id /proc/sys/kernel/random/uuid; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; echo`
	seen := map[string]string{}
	for i := range n {
		s, err := b.Restore(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		res := run(t, s, read+"; sleep 0.01; "+read+"; sleep 0.09; "+read)
		s.Destroy(ctx)
		lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
		if len(lines) != 12 {
			t.Fatalf("clone %d printed %q", i, res.Stdout)
		}
		for j, l := range lines {
			what := []string{"boot_id", "machine-id", "uuid", "urandom"}[j%4]
			if what == "boot_id" || what == "machine-id" {
				if j >= 4 && l != lines[j%4] {
					t.Fatalf("clone %d: its %s changed during a job: %q then %q", i, what, lines[j%4], l)
				}
				if j >= 4 {
					continue // the same clone's own, read again
				}
			}
			if other, dup := seen[l]; dup {
				t.Fatalf("clone %d's %s %q equals %s", i, what, l, other)
			}
			seen[l] = fmt.Sprintf("clone %d's %s", i, what)
		}
	}
	t.Logf("%d clones, %d distinct readings", n, len(seen))
}
