package snapshot

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func testKey(hash string) Key {
	return Key{Backend: "microvm", Version: "qemu 7.2", Kernel: "6.18", ConfigHash: hash, Template: "t1"}
}

func TestCommitFindRemove(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	k := testKey("h1")
	if _, err := s.Find(k); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Find before any build: %v", err)
	}
	b, err := s.Begin(k)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.Path("state"), []byte("device state"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Find(k); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a build is visible before Commit: %v", err)
	}
	g, err := b.Commit()
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Find(k)
	if err != nil || got.Dir != g.Dir || got.Key != k {
		t.Fatalf("Find after Commit: %+v %v", got, err)
	}
	if b, _ := os.ReadFile(got.Path("state")); string(b) != "device state" {
		t.Fatalf("state %q", b)
	}
	if _, err := s.Find(testKey("h2")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another key found the golden: %v", err)
	}
	if err := s.Remove(k); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Find(k); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Find after Remove: %v", err)
	}
}

// A file that is not 0600 is refused at Commit, and a committed golden
// whose files were loosened later is not trusted: removed, not found.
func TestOnlyPrivateFiles(t *testing.T) {
	s, _ := Open(t.TempDir())
	k := testKey("h1")
	b, _ := s.Begin(k)
	os.WriteFile(b.Path("ram"), []byte("x"), 0o644)
	if _, err := b.Commit(); err == nil {
		t.Fatal("committed a world-readable file")
	}
	if _, err := os.Stat(b.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused build is left: %v", err)
	}
	b, _ = s.Begin(k)
	os.WriteFile(b.Path("ram"), []byte("x"), 0o600)
	g, err := b.Commit()
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(g.Path("ram"), 0o644)
	if _, err := s.Find(k); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a loosened golden was trusted: %v", err)
	}
	if _, err := os.Stat(g.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a loosened golden was not removed")
	}
}

// Reconcile is invariant 7 for snapshots: builds of dead processes and
// goldens keep rejects go; a live process's build and kept goldens stay.
func TestReconcile(t *testing.T) {
	s, _ := Open(t.TempDir())
	keep, stale := testKey("current"), testKey("old")
	for _, k := range []Key{keep, stale} {
		b, _ := s.Begin(k)
		if _, err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	live, _ := s.Begin(keep) // this process is alive: its build must survive
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(s.Dir(), "microvm", fmt.Sprintf("%s%s-%d-%s", buildPrefix, keep.ID(), dead.Process.Pid, "0123456789ab"))
	os.Mkdir(orphan, 0o700)
	junk := filepath.Join(s.Dir(), "microvm", "not-a-golden")
	os.Mkdir(junk, 0o700)
	removed, err := s.Reconcile("microvm", func(k Key) bool { return k.ConfigHash == "current" })
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 3 {
		t.Errorf("removed %v, want the stale golden, the orphan build and the junk", removed)
	}
	if _, err := s.Find(keep); err != nil {
		t.Errorf("kept golden: %v", err)
	}
	if _, err := s.Find(stale); !errors.Is(err, ErrNotFound) {
		t.Errorf("stale golden: %v", err)
	}
	for _, p := range []string{orphan, junk} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s survives", p)
		}
	}
	if _, err := os.Stat(live.Dir()); err != nil {
		t.Errorf("a live process's build was removed: %v", err)
	}
}

func TestBadKey(t *testing.T) {
	s, _ := Open(t.TempDir())
	for _, k := range []Key{{Backend: "../x", Version: "v", ConfigHash: "h", Template: "t"}, {Backend: "microvm"}} {
		if _, err := s.Begin(k); err == nil {
			t.Errorf("Begin(%+v) accepted", k)
		}
	}
}
