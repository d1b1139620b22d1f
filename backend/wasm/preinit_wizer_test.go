package wasm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// wizerVersion is the reference implementation the transformation follows.
const wizerVersion = "10.0.0"

// wizer installs npm's @bytecodealliance/wizer into a temporary directory
// and returns its command, or skips saying why it cannot.
func wizer(t *testing.T) string {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not on PATH: the side-by-side test against wizer " + wizerVersion + " needs it")
	}
	dir := t.TempDir()
	cmd := exec.Command(npm, "install", "--prefix", dir, "--no-audit", "--no-fund", "--loglevel=error", "@bytecodealliance/wizer@"+wizerVersion)
	cmd.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(dir, ".npm"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("npm cannot install wizer %s here (registry unreachable?): %v: %s", wizerVersion, err, tail(out))
	}
	bin := filepath.Join(dir, "node_modules", ".bin", "wizer")
	if out, err := exec.Command(bin, "--version").Output(); err != nil || string(bytes.TrimSpace(out)) != "wizer "+wizerVersion {
		t.Fatalf("wizer --version: %q %v", out, err)
	}
	return bin
}

// TestPreinitMatchesWizer runs wizer 10.0.0 and wovyr's transformation on
// the same modules and checks that the outputs behave the same — the same
// stdout from the same calls, twice in a row — and are the same bytes.
func TestPreinitMatchesWizer(t *testing.T) {
	bin := wizer(t)
	b := privateBackend(t)
	dir := t.TempDir()
	for _, c := range []struct {
		name, init string
		mod        []byte
	}{
		{"named init", "init", stateModule(t, "init")},
		{"wizer.initialize", WizerInit, stateModule(t, WizerInit)},
		{"heavy init", WizerInit, heavyModule(t, 1000)},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := filepath.Join(dir, "in.wasm")
			want := filepath.Join(dir, "wizer.wasm")
			if err := os.WriteFile(in, c.mod, 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "--allow-wasi", "--inherit-stdio=false", "--init-func", c.init, "-o", want, in)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("wizer: %v: %s", err, out)
			}
			theirs, err := os.ReadFile(want)
			if err != nil {
				t.Fatal(err)
			}
			ours, err := preinitialise(context.Background(), c.mod, c.init, initBounds{wall: 10e9, memory: 1 << 24})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				// Wizer's output no longer exports the init function, so it
				// runs as it is; ours is what the backend runs for c.init.
				got := run(t, b, inv(theirs, "m"))
				in := inv(c.mod, "m")
				in.Workload.Init = c.init
				mine := run(t, b, in)
				if got.Class != mine.Class || got.ExitCode != mine.ExitCode || !bytes.Equal(got.Stdout, mine.Stdout) || !bytes.Equal(got.Stderr, mine.Stderr) {
					t.Fatalf("call %d: wizer's module gave %q exit %d %q, wovyr's %q exit %d %q", i, got.Class, got.ExitCode, got.Stdout, mine.Class, mine.ExitCode, mine.Stdout)
				}
			}
			if !bytes.Equal(ours, theirs) {
				t.Fatalf("modules differ: wizer %d bytes, wovyr %d bytes\n%s", len(theirs), len(ours), sectionDiff(t, theirs, ours))
			}
		})
	}
}

func sectionDiff(t *testing.T, a, b []byte) string {
	sa, err := parseSections(a)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := parseSections(b)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for i := range max(len(sa), len(sb)) {
		var x, y section
		if i < len(sa) {
			x = sa[i]
		}
		if i < len(sb) {
			y = sb[i]
		}
		if x.id != y.id || !bytes.Equal(x.body, y.body) {
			fmt.Fprintf(&out, "section %d: wizer id %d %x\n            wovyr id %d %x\n", i, x.id, x.body, y.id, y.body)
		}
	}
	return out.String()
}
