package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/probecache"
	"github.com/wovyr/wovyr/store"
)

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o600)
}

// freshState is a state dir whose store certifies native and holds no
// probe answer.
func freshState(t *testing.T) string {
	t.Helper()
	// Not t.TempDir: sandbox uids must traverse every ancestor.
	parent, err := os.MkdirTemp("", "wovyr-cli-probes-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	os.Chmod(parent, 0o755)
	dir := filepath.Join(parent, "state")
	if err := os.MkdirAll(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := copyFile(certifiedDB, filepath.Join(dir, "wovyr.db")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func probesIn(t *testing.T, dir string) []probecache.Record {
	t.Helper()
	s, err := store.Open(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs, err := s.Probes()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func probedNames(recs []probecache.Record) []string {
	var names []string
	for _, r := range recs {
		names = append(names, r.Backend)
	}
	slices.Sort(names)
	return names
}

func wovyrIn(t *testing.T, dir string, args ...string) outcome {
	t.Helper()
	saved := stateDir
	stateDir = dir
	defer func() { stateDir = saved }()
	return wovyr(t, "", args...)
}

// TestRunProbesOnlyWhatSelectionNeeds: a run probes the backends from the
// required strength up, in order, and stops at the first usable one;
// nothing below the requirement, nothing above the choice.
func TestRunProbesOnlyWhatSelectionNeeds(t *testing.T) {
	dir := freshState(t)
	if o := wovyrIn(t, dir, "run", "--trust", "trusted", "--", "/bin/true"); o.code != 0 {
		t.Fatalf("run: %+v", o)
	}
	if got := probedNames(probesIn(t, dir)); !slices.Equal(got, []string{"native"}) {
		t.Fatalf("a trusted run probed %v; want native only", got)
	}
	// Untrusted needs gVisor or stronger; neither is certified in this
	// state dir, so both are probed and the run refused.
	if o := wovyrIn(t, dir, "run", "--trust", "untrusted", "--", "/bin/true"); o.code != exitFloorUnmet {
		t.Fatalf("untrusted run: %+v", o)
	}
	if got := probedNames(probesIn(t, dir)); !slices.Equal(got, []string{"gvisor", "microvm", "native"}) {
		t.Fatalf("after an untrusted run the store has probes of %v; want gvisor, microvm and native (not wasm or container)", got)
	}
}

// TestBackendsAnswersFromStoredProbes: the first `wovyr backends` probes
// every backend; the next answers from the store, saying how old each
// probe is; --probe probes again.
func TestBackendsAnswersFromStoredProbes(t *testing.T) {
	dir := freshState(t)
	probed := func(o outcome) []string {
		var col []string
		for _, line := range strings.Split(strings.TrimSpace(o.stdout), "\n")[1:] {
			col = append(col, strings.Fields(line)[4])
		}
		return col
	}
	first := wovyrIn(t, dir, "backends")
	if first.code != 0 || !slices.Equal(probed(first), []string{"now", "now", "now", "now", "now"}) {
		t.Fatalf("first backends:\n%s%s", first.stdout, first.stderr)
	}
	recs := probesIn(t, dir)
	if got := probedNames(recs); !slices.Equal(got, []string{"container", "gvisor", "microvm", "native", "wasm"}) {
		t.Fatalf("stored probes of %v", got)
	}
	second := wovyrIn(t, dir, "backends")
	for i, p := range probed(second) {
		if p == "now" {
			t.Fatalf("row %d of the second backends is %q, want an age:\n%s", i, p, second.stdout)
		}
	}
	if !hasRow(second.stdout, "native", "yes", "yes") {
		t.Fatalf("second backends lost native's certification:\n%s", second.stdout)
	}
	if again := probesIn(t, dir); !slices.EqualFunc(again, recs, func(a, b probecache.Record) bool { return a.At.Equal(b.At) && a.Key == b.Key }) {
		t.Fatal("answering from the store wrote the store")
	}
	forced := wovyrIn(t, dir, "backends", "--probe")
	if !slices.Equal(probed(forced), []string{"now", "now", "now", "now", "now"}) {
		t.Fatalf("backends --probe:\n%s", forced.stdout)
	}
}

// TestStoredProbeVoidedByANewBinary: every probe key covers the wovyr
// executable, so a rebuilt (here: touched) binary probes again.
func TestStoredProbeVoidedByANewBinary(t *testing.T) {
	dir := freshState(t)
	if o := wovyrIn(t, dir, "run", "--trust", "trusted", "--", "/bin/true"); o.code != 0 {
		t.Fatalf("run: %+v", o)
	}
	if o := wovyrIn(t, dir, "run", "--trust", "trusted", "--", "/bin/true"); o.code != 0 {
		t.Fatalf("run: %+v", o)
	}
	if n := len(probesIn(t, dir)); n != 1 {
		t.Fatalf("%d stored probes after two runs of one binary; want 1", n)
	}
	at := time.Now().Add(time.Minute)
	if err := os.Chtimes(wovyrBin, at, at); err != nil {
		t.Fatal(err)
	}
	if o := wovyrIn(t, dir, "run", "--trust", "trusted", "--", "/bin/true"); o.code != 0 {
		t.Fatalf("run: %+v", o)
	}
	if recs := probesIn(t, dir); len(recs) != 2 || recs[0].Key == recs[1].Key {
		t.Fatalf("stored probes %+v; want a second answer under a new key", recs)
	}
}
