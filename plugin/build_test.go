package plugin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The test components (testdata/calc, testdata/rand) are C written in the
// component model's canonical ABI, built with clang into a core module and
// wrapped with jco (embed the WIT, then new). The built components are
// committed beside their source (a few KB) so the other tests run where npm
// is unreachable; TestComponentsBuildFromSource rebuilds them with the real
// toolchains and fails if the committed bytes differ from the build.

// jcoPreload is the preload jco 1.35 needs: its bundled wasm-tools runs
// under the preview2 shim, which starts with no filesystem preopens, so
// without it every path jco hands wasm-tools is "not found".
const jcoPreload = `import { _setPreopens } from '%s';
_setPreopens({ '/': '/' });
`

// jco returns the command line that runs jco with the preload, or skips
// the test when npm cannot install it.
func jco(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("../scripts/npm-deps").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Skipf("jco is not installable here (npm unreachable?): %v %s", err, stderr)
	}
	nm := filepath.Join(strings.TrimSpace(string(out)), "node_modules")
	shim := filepath.Join(nm, "@bytecodealliance/jco-transpile/node_modules/@bytecodealliance/preview2-shim/dist/nodejs/filesystem.js")
	if _, err := os.Stat(shim); err != nil {
		t.Fatalf("jco's preview2 shim moved: %v", err)
	}
	pre := filepath.Join(t.TempDir(), "jco-preload.mjs")
	if err := os.WriteFile(pre, []byte(strings.Replace(jcoPreload, "%s", shim, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"node", "--import", pre, filepath.Join(nm, "@bytecodealliance/jco/dist/jco.js")}
}

// buildComponent builds testdata/NAME/NAME.c against testdata/NAME's WIT,
// cached per machine under the user cache directory by a digest of the
// sources, and returns the component's bytes.
func buildComponent(t *testing.T, jcoCmd []string, name string) []byte {
	t.Helper()
	src, _ := filepath.Abs(filepath.Join("testdata", name))
	h := sha256.New()
	h.Write([]byte(strings.Join(jcoCmd[3:], " ")))
	filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".c") || strings.HasSuffix(p, ".wit")) {
			b, _ := os.ReadFile(p)
			h.Write([]byte(p[len(src):]))
			h.Write(b)
		}
		return nil
	})
	cacheRoot, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	cached := filepath.Join(cacheRoot, "wovyr", "components", name+"-"+hex.EncodeToString(h.Sum(nil))[:16]+".wasm")
	if b, err := os.ReadFile(cached); err == nil {
		return b
	}
	tmp := t.TempDir()
	core, embedded, comp := filepath.Join(tmp, "core.wasm"), filepath.Join(tmp, "embed.wasm"), filepath.Join(tmp, "c.wasm")
	for _, argv := range [][]string{
		{"clang", "--target=wasm32", "-nostdlib", "-O2", "-Wl,--no-entry", "-o", core, filepath.Join(src, name+".c")},
		append(append([]string{}, jcoCmd...), "embed", "--wit", src, "-o", embedded, core),
		append(append([]string{}, jcoCmd...), "new", embedded, "-o", comp),
	} {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = "/" // jco resolves paths from its preopen
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
		}
	}
	b, err := os.ReadFile(comp)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err == nil {
		tmpc := cached + ".tmp"
		if os.WriteFile(tmpc, b, 0o644) == nil {
			os.Rename(tmpc, cached)
		}
	}
	return b
}

func TestComponentsBuildFromSource(t *testing.T) {
	cmd := jco(t)
	for _, name := range []string{"calc", "rand"} {
		built := buildComponent(t, cmd, name)
		committed, err := os.ReadFile(filepath.Join("testdata", name, name+".wasm"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(built, committed) {
			t.Errorf("testdata/%s/%s.wasm differs from what its source builds (%d vs %d bytes): rebuild and commit it", name, name, len(committed), len(built))
		}
	}
}
