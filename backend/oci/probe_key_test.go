package oci

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// TestAdoptTakesTheProbedRuntime: a second process (a new Backend of the
// same configuration) adopts the first one's probe answer without running
// anything, ends up with the same runtime, and runs a workload on it.
func TestAdoptTakesTheProbedRuntime(t *testing.T) {
	for _, c := range constructors {
		t.Run(c.name, func(t *testing.T) {
			first, err := c.new(testConfig(t))
			if err != nil {
				t.Fatal(err)
			}
			capa := first.Probe(context.Background())
			if !capa.Available {
				t.Fatalf("probe: %s", capa.Reason)
			}
			second, err := c.new(testConfig(t))
			if err != nil {
				t.Fatal(err)
			}
			if first.ProbeKey() != second.ProbeKey() {
				t.Fatal("two backends of one configuration have different probe keys")
			}
			if err := second.Adopt(context.Background(), capa); err != nil {
				t.Fatal(err)
			}
			a, b := *first.driver, *second.driver
			if a.name != b.name || a.path != b.path || a.version != b.version || a.accel != b.accel ||
				a.hybrid != b.hybrid || a.root != b.root || !slices.Equal(a.flags, b.flags) {
				t.Fatalf("adopted driver %+v, probed %+v", b, a)
			}
			res, _ := runChecked(t, second, cmd("/bin/echo", "adopted"), nil)
			if string(res.Stdout) != "adopted\n" || res.ExitCode != 0 {
				t.Fatalf("run on the adopted runtime: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
			}

			third, _ := c.new(testConfig(t))
			for name, mod := range map[string]func(*sandbox.Capability){
				"a runtime this backend does not run": func(o *sandbox.Capability) { o.Version = "youki version 0.1" },
				"a runsc platform it does not try":    func(o *sandbox.Capability) { o.Accel = "kvm" },
			} {
				other := capa
				mod(&other)
				if err := third.Adopt(context.Background(), other); err == nil {
					t.Errorf("%s: adopted", name)
				}
			}
			// The stored hash is the probe's own: the key covers all it
			// digests (TestProbeKeyFollowsRuntimeAndConfig).
			if got := second.configHash(second.driver); got != capa.ConfigHash {
				t.Fatalf("adopted driver hashes to %s, the probe said %s", got, capa.ConfigHash)
			}
		})
	}
}

// TestProbeKeyFollowsRuntimeAndConfig: the key changes when the runtime
// binary is replaced or touched, and when configuration changes.
func TestProbeKeyFollowsRuntimeAndConfig(t *testing.T) {
	path, err := exec.LookPath("runc")
	if err != nil {
		t.Skip("runc not installed")
	}
	dir := t.TempDir()
	runc := filepath.Join(dir, "runc")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(runc, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Runtime = runc
	key := func(cfg Config) string {
		b, err := NewContainer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return b.ProbeKey()
	}
	k0 := key(cfg)
	if key(cfg) != k0 {
		t.Fatal("key is not stable")
	}
	at := time.Now().Add(time.Hour)
	if err := os.Chtimes(runc, at, at); err != nil {
		t.Fatal(err)
	}
	k1 := key(cfg)
	if k1 == k0 {
		t.Error("touching the runtime kept the key")
	}
	if err := os.WriteFile(runc+".new", data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(runc+".new", runc); err != nil {
		t.Fatal(err)
	}
	if key(cfg) == k1 {
		t.Error("replacing the runtime kept the key")
	}
	k2 := key(cfg)
	pooled := cfg
	pooled.Pooled = true
	noRunner := cfg
	noRunner.WasmRunner = ""
	for name, c := range map[string]Config{"pooled": pooled, "no wasm runner": noRunner} {
		if key(c) == k2 {
			t.Errorf("%s: same key", name)
		}
	}
}

// TestInstallBinaryRemembersItsSource: a second install of an unchanged
// source finds the copy by the source's identity; a changed source gets a
// new copy; a removed copy is made again.
func TestInstallBinaryRemembersItsSource(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o711); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(testAgent)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, data, 0o755); err != nil {
		t.Fatal(err)
	}
	first, err := installBinary(src, bin, "agent")
	if err != nil {
		t.Fatal(err)
	}
	memos, _ := filepath.Glob(filepath.Join(bin, ".agent-src-*"))
	if len(memos) != 1 {
		t.Fatalf("memos %v; want one", memos)
	}
	if again, err := installBinary(src, bin, "agent"); err != nil || again != first {
		t.Fatalf("second install: %q, %v; want %q", again, err, first)
	}
	// The same content under another identity finds the same copy.
	if err := os.WriteFile(src, data, 0o755); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(time.Hour)
	os.Chtimes(src, at, at)
	if same, err := installBinary(src, bin, "agent"); err != nil || same != first {
		t.Fatalf("same content, touched: %q, %v; want %q", same, err, first)
	}
	// Another content gets another copy.
	if err := os.WriteFile(src, append(data, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	changed, err := installBinary(src, bin, "agent")
	if err != nil || changed == first {
		t.Fatalf("changed source: %q, %v; want a new copy", changed, err)
	}
	if err := os.Remove(changed); err != nil {
		t.Fatal(err)
	}
	if again, err := installBinary(src, bin, "agent"); err != nil || again != changed || !fileExists(changed) {
		t.Fatalf("removed copy: %q, %v; want %q made again", again, err, changed)
	}
	if _, err := installBinary(filepath.Join(dir, "missing"), bin, "agent"); err == nil {
		t.Fatal("installed a missing binary")
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

var _ sandbox.ProbeCacher = (*Backend)(nil)
