// Package plugintest builds the plugin tests' components with the real
// toolchains — clang and jco for C, `jco componentize` (StarlingMonkey)
// for JavaScript — from sources under plugin/testdata, so that the
// plugin, server and CLI tests run the same components.
//
// Builds are cached per machine under the user cache directory, keyed by a
// digest of the sources and the toolchain, because a JavaScript component
// takes tens of seconds to make. Where npm cannot install jco the tests
// that need it skip, saying so.
package plugintest

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// jcoPreload is the preload jco 1.35 needs: its bundled wasm-tools runs
// under the preview2 shim, which starts with no filesystem preopens, so
// without it every path jco hands wasm-tools is "not found".
const jcoPreload = `import { _setPreopens } from '%s';
_setPreopens({ '/': '/' });
`

// Jco returns the command line that runs jco with its preload, or skips
// the test when npm cannot install it.
func Jco(t testing.TB) []string {
	t.Helper()
	root := repoRoot(t)
	out, err := exec.Command(filepath.Join(root, "scripts", "npm-deps")).Output()
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

// C builds plugin/testdata/NAME/NAME.c, written in the canonical ABI,
// into a core module with clang and wraps it against the directory's WIT
// with jco (embed, then new).
func C(t testing.TB, jco []string, name string) []byte {
	t.Helper()
	return build(t, jco, name, []string{".c", ".wit"}, func(src, tmp, out string) [][]string {
		core, embedded := filepath.Join(tmp, "core.wasm"), filepath.Join(tmp, "embed.wasm")
		return [][]string{
			{"clang", "--target=wasm32", "-nostdlib", "-O2", "-Wl,--no-entry", "-o", core, filepath.Join(src, name+".c")},
			append(append([]string{}, jco...), "embed", "--wit", src, "-o", embedded, core),
			append(append([]string{}, jco...), "new", embedded, "-o", out),
		}
	})
}

// JS builds plugin/testdata/NAME/NAME.js against the world NAME of the
// directory's WIT (and its deps) with `jco componentize`, every WASI
// feature disabled: the component imports only what its world imports
// (StarlingMonkey, about 12 MB).
func JS(t testing.TB, jco []string, name string) []byte {
	t.Helper()
	return build(t, jco, name, []string{".js", ".wit"}, func(src, _, out string) [][]string {
		return [][]string{append(append([]string{}, jco...), "componentize", filepath.Join(src, name+".js"),
			"--wit", src, "--world-name", name, "--disable", "all", "-o", out)}
	})
}

// build runs steps over testdata/name unless the machine's cache holds
// their output for these sources (files ending in exts) and this jco.
func build(t testing.TB, jco []string, name string, exts []string, steps func(src, tmp, out string) [][]string) []byte {
	t.Helper()
	src := filepath.Join(repoRoot(t), "plugin", "testdata", name)
	h := sha256.New()
	h.Write([]byte(strings.Join(jco[3:], " ")))
	// The sources, and wovyr's host WIT, which a component's wit/deps may
	// link to (WalkDir does not follow the link).
	hostWIT := filepath.Join(repoRoot(t), "plugin", "wit")
	for _, dir := range []string{src, hostWIT} {
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && hasSuffix(p, exts) {
				b, _ := os.ReadFile(p)
				h.Write([]byte(p[len(dir):]))
				h.Write(b)
			}
			return nil
		})
	}
	cacheRoot, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	cached := filepath.Join(cacheRoot, "wovyr", "components", name+"-"+hex.EncodeToString(h.Sum(nil))[:16]+".wasm")
	if b, err := os.ReadFile(cached); err == nil {
		return b
	}
	tmp := t.TempDir()
	out := filepath.Join(tmp, "component.wasm")
	for _, argv := range steps(src, tmp, out) {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = "/" // jco resolves paths from its preopen
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, b)
		}
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// Another package's tests may be building the same component.
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err == nil {
		if f, err := os.CreateTemp(filepath.Dir(cached), name+"-*.tmp"); err == nil {
			_, werr := f.Write(b)
			if cerr := f.Close(); werr == nil && cerr == nil {
				os.Rename(f.Name(), cached)
			}
			os.Remove(f.Name())
		}
	}
	return b
}

func hasSuffix(p string, exts []string) bool {
	for _, e := range exts {
		if strings.HasSuffix(p, e) {
			return true
		}
	}
	return false
}

// repoRoot is the module's root, from this file's place in it.
func repoRoot(t testing.TB) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("plugintest: no caller information")
	}
	return filepath.Dir(filepath.Dir(filepath.Dir(file)))
}
