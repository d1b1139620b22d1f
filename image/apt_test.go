package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAptSetRefusesBeforeAnything: package lists that are not Debian
// package names are refused, typed, with nothing created.
func TestAptSetRefusesBeforeAnything(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "images")
	for _, pkgs := range [][]string{{"python3", "x;rm -rf /"}, {"-o=APT::X"}, {"Upper"}, {""}, make([]string, 65)} {
		err := BuildApt(context.Background(), "t", dir, pkgs, nil)
		if !errors.Is(err, ErrBadPackage) {
			t.Errorf("BuildApt(%q): %v, want ErrBadPackage", pkgs, err)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a refused build created %s: %v", dir, err)
	}
	if set, err := aptSet([]string{"python3", "nodejs", "python3"}); err != nil || strings.Join(set, ",") != "nodejs,python3" {
		t.Errorf("aptSet = %v %v, want sorted without repeats", set, err)
	}
}

// TestBuildAptFromCache: a package set whose tree is cached is copied
// from the cache, modes and links kept, without debootstrap (PATH has
// none here); every name gets its own copy; the python recipe gets its
// warm-up with it.
func TestBuildAptFromCache(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "images")
	seed := func(pkgs ...string) string {
		sum := sha256.Sum256([]byte(strings.Join(pkgs, "\n")))
		root := filepath.Join(dir, aptCacheDir, hex.EncodeToString(sum[:8]), "rootfs")
		if err := os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "usr/bin/tool"), []byte(strings.Join(pkgs, " ")), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("usr/bin", filepath.Join(root, "bin")); err != nil {
			t.Fatal(err)
		}
		return root
	}
	seed("nodejs", "python3")
	seed("python3")
	// A PATH with cp and no debootstrap.
	bin := t.TempDir()
	cp, err := exec.LookPath("cp")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(cp, filepath.Join(bin, "cp")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	ctx := context.Background()
	for _, name := range []string{"agents", "agents2"} {
		if err := BuildApt(ctx, name, dir, []string{"python3", "nodejs"}, nil); err != nil {
			t.Fatal(err)
		}
		root := RootFS(dir, name)
		b, err := os.ReadFile(filepath.Join(root, "bin/tool"))
		fi, _ := os.Stat(filepath.Join(root, "usr/bin/tool"))
		if err != nil || string(b) != "nodejs python3" || fi == nil || fi.Mode().Perm() != 0o750 {
			t.Fatalf("%s: %q %v %v", name, b, err, fi)
		}
	}
	os.WriteFile(filepath.Join(RootFS(dir, "agents"), "usr/bin/tool"), []byte("changed"), 0o750)
	if b, _ := os.ReadFile(filepath.Join(RootFS(dir, "agents2"), "usr/bin/tool")); string(b) != "nodejs python3" {
		t.Errorf("templates share their files: %q", b)
	}
	if err := Build(ctx, "python", dir, nil); err != nil {
		t.Fatal(err)
	}
	if argv, err := Warmup(dir, "python"); err != nil || strings.Join(argv, " ") != "python3 -c import json, re, subprocess" {
		t.Errorf("python's warm-up: %q %v", argv, err)
	}
	if err := BuildApt(ctx, "uncached", dir, []string{"jq"}, nil); err == nil || !strings.Contains(err.Error(), "debootstrap") {
		t.Errorf("an uncached set without debootstrap: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, aptCacheDir)); len(ents) != 2 {
		t.Errorf("the cache after a failed build holds %d entries, want the 2 seeded", len(ents))
	}
	if Exists(dir, "uncached") {
		t.Error("a failed build left its template")
	}
}

// TestAptCacheKeepsAncestorsSearchable: the first build on a fresh
// machine makes the templates' directory and its ancestors as Import
// does, searchable by others (sandbox uids traverse them to their
// bundles), and only the cache itself root's alone — even when the build
// then fails (no debootstrap on PATH here).
func TestAptCacheKeepsAncestorsSearchable(t *testing.T) {
	state := filepath.Join(t.TempDir(), "fresh", "state")
	dir := filepath.Join(state, "images")
	t.Setenv("PATH", t.TempDir())
	if err := BuildApt(context.Background(), "uncached", dir, []string{"jq"}, nil); err == nil {
		t.Fatal("built without debootstrap")
	}
	for _, d := range []string{filepath.Dir(state), state, dir} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o711 {
			t.Errorf("%s: %v %v, want 0711", d, fi.Mode().Perm(), err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, aptCacheDir)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the cache: %v %v, want 0700", fi.Mode().Perm(), err)
	}
}
