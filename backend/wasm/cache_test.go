package wasm

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"

	"github.com/wovyr/wovyr/sandbox"
)

// artifactPath is where the cache keeps the compiled code of mod.
func artifactPath(b *Backend, mod []byte) string {
	return filepath.Join(b.cfg.StateDir, "wasm", "cache", started(b).key(digest(mod))+".cwasm")
}

func counts(b *Backend) [3]int64 {
	c := started(b)
	return [3]int64{c.compiled.Load(), c.loaded.Load(), c.discarded.Load()}
}

// started starts b's engine, as its first run would, and returns its
// module cache.
func started(b *Backend) *cache {
	if err := b.started(); err != nil {
		panic(err)
	}
	return b.modules
}

func runOK(t *testing.T, b *Backend, mod []byte) {
	t.Helper()
	if res := run(t, b, inv(mod, "hello", "x")); res.Class != sandbox.OK || string(res.Stdout) != "hello x\n" {
		t.Fatalf("class %q stdout %q", res.Class, res.Stdout)
	}
}

func TestCacheStoresAndReloadsArtifacts(t *testing.T) {
	dir := t.TempDir()
	mod := guest(t, "c/hello")
	b1 := newBackend(t, func(c *Config) { c.StateDir = dir })
	runOK(t, b1, mod)
	runOK(t, b1, mod) // in memory now
	if got := counts(b1); got != [3]int64{1, 0, 0} {
		t.Fatalf("first backend compiled/loaded/discarded = %v", got)
	}
	fi, err := os.Stat(artifactPath(b1, mod))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("artifact: %v %v", fi, err)
	}
	b2 := newBackend(t, func(c *Config) { c.StateDir = dir })
	runOK(t, b2, mod)
	if got := counts(b2); got != [3]int64{0, 1, 0} {
		t.Fatalf("second backend compiled/loaded/discarded = %v", got)
	}
}

func TestCorruptArtifactIsRecompiledNotTrusted(t *testing.T) {
	mod := guest(t, "c/hello")
	for name, corrupt := range map[string]func(t *testing.T, path string, other []byte){
		"flipped payload byte": func(t *testing.T, p string, _ []byte) {
			b, _ := os.ReadFile(p)
			b[len(b)/2] ^= 0xff
			os.WriteFile(p, b, 0o600)
		},
		"truncated": func(t *testing.T, p string, _ []byte) {
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)/3], 0o600)
		},
		"another module's artifact": func(t *testing.T, p string, other []byte) {
			os.WriteFile(p, other, 0o600)
		},
		"garbage with a valid checksum": func(t *testing.T, p string, _ []byte) {
			b, _ := os.ReadFile(p)
			payload := []byte("\x7fELF garbage that is no wasmtime module")
			sum := sha256.Sum256(payload)
			b = append(append(b[:40:40], sum[:]...), payload...)
			os.WriteFile(p, b, 0o600)
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			b1 := newBackend(t, func(c *Config) { c.StateDir = dir })
			runOK(t, b1, mod)
			other := guest(t, "wat/tiny")
			run(t, b1, inv(other, "t"))
			otherArt, _ := os.ReadFile(artifactPath(b1, other))
			corrupt(t, artifactPath(b1, mod), otherArt)

			b2 := newBackend(t, func(c *Config) { c.StateDir = dir })
			runOK(t, b2, mod)
			if got := counts(b2); got != [3]int64{1, 0, 1} {
				t.Fatalf("compiled/loaded/discarded = %v, want the artifact discarded and recompiled", got)
			}
			b3 := newBackend(t, func(c *Config) { c.StateDir = dir })
			runOK(t, b3, mod)
			if got := counts(b3); got != [3]int64{0, 1, 0} {
				t.Fatalf("after recompiling: compiled/loaded/discarded = %v", got)
			}
		})
	}
}

func TestCacheKeyCoversCodeShapingConfig(t *testing.T) {
	dir := t.TempDir()
	mod := guest(t, "c/hello")
	b1 := newBackend(t, func(c *Config) { c.StateDir = dir })
	b2 := newBackend(t, func(c *Config) { c.StateDir = dir; c.Engine.MaxMemory = 1 << 30 })
	if artifactPath(b1, mod) == artifactPath(b2, mod) {
		t.Fatal("engines with different memory layouts share a cache key")
	}
	// The runner's small pool compiles the same code: it reuses artifacts.
	runOK(t, b1, mod)
	b3 := newBackend(t, func(c *Config) { c.StateDir = dir; c.Engine.PoolSlots = 2 })
	runOK(t, b3, mod)
	if got := counts(b3); got != [3]int64{0, 1, 0} {
		t.Fatalf("small-pool engine compiled/loaded/discarded = %v, want a load", got)
	}
}
