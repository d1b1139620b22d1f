package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/store"
)

// The messages a newcomer meets first (issue #26), as the binary prints
// them.

// Regression for #26 item 3: as an unprivileged user `wovyr run` failed
// with "open state: store: mkdir /nonexistent: permission denied".
func TestNotRootSaysWhatNeedsRoot(t *testing.T) {
	writable, err := os.MkdirTemp("", "wovyr-nobody-state-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(writable)
	if err := os.Chown(writable, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	asNobody := func(args ...string) outcome { t.Helper(); return asUser(t, "/nonexistent", args...) }
	for _, state := range [][]string{nil, {"--state-dir", writable}} {
		for what, args := range map[string][]string{
			"wovyr run of a command": {"run", "--trust", "trusted", "--", "/bin/true"},
			"wovyr serve":            {"serve", "--listen", "127.0.0.1:0"},
			"wovyr image build":      {"image", "build", "busybox"},
			"wovyr certify --config": {"certify", "--config", "/nonexistent.yaml"},
			"wovyr bench":            {"bench"},
		} {
			o := asNobody(append(append([]string{}, state...), args...)...)
			want := "wovyr: " + what + " needs root (this is uid 65534).\nwovyr runs sandboxes as root; each backend needs it for:\n"
			if o.code != exitBackendFailure || !strings.HasPrefix(o.stderr, want) || !strings.Contains(o.stderr, "wovyr run --remote") || strings.Contains(o.stderr, "permission denied") {
				t.Errorf("as nobody, %v %v: %+v\nwant exit %d and stderr starting %q", state, args, o, exitBackendFailure, want)
			}
		}
	}
	if ents, _ := os.ReadDir(writable); len(ents) != 0 {
		t.Errorf("refused commands wrote to the state dir: %v", ents)
	}
	// What needs no root still works: help, version, a run through a daemon.
	if o := asNobody("--help"); o.code != 0 || !strings.Contains(o.stdout, "needs it for:") {
		t.Errorf("--help as nobody: %+v", o)
	}
	if o := asNobody("version"); o.code != 0 {
		t.Errorf("version as nobody: %+v", o)
	}
	if o := asNobody("run", "--remote", "http://127.0.0.1:1", "--token", "x", "--", "/bin/true"); strings.Contains(o.stderr, "needs root") {
		t.Errorf("run --remote as nobody was refused for want of root: %+v", o)
	}
	// What runs without root (wasm) says so when its default state dir,
	// under a home that does not exist, cannot be made.
	want := "wovyr: state dir /nonexistent/.local/state/wovyr: mkdir /nonexistent: permission denied; without root the state dir is $XDG_STATE_HOME/wovyr, else $HOME/.local/state/wovyr: give --state-dir DIR (or WOVYR_STATE_DIR) a directory this user can write\n"
	if o := asNobody("backends"); o.code != exitBackendFailure || o.stderr != want {
		t.Errorf("backends as nobody without a home: %+v\nwant exit %d and stderr %q", o, exitBackendFailure, want)
	}
}

// Regression for #26 item 1: certifying the container backend on a state
// dir without the busybox template recorded a failed certification listing
// every probe.
func TestCertifyWithoutTemplateRecordsNothing(t *testing.T) {
	fresh, err := os.MkdirTemp("", "wovyr-fresh-state-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(fresh)
	os.Chmod(fresh, 0o711)
	cmd := exec.Command(wovyrBin, "--state-dir", fresh, "certify", "--backend", "container")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	code := exitCode(cmd.Run())
	want := "wovyr: container: not certified, the battery did not run: no template \"busybox\" to test with: build it with `wovyr image build busybox`\n"
	if code != exitBackendFailure || !strings.HasSuffix(errb.String(), want) || strings.Contains(errb.String(), "certification failed") {
		t.Fatalf("certify container without a template: exit %d, stderr %q; want exit %d ending %q", code, errb.String(), exitBackendFailure, want)
	}
	s, err := store.Open(fresh, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if set, err := s.Certs(); err != nil || len(set) != 0 {
		t.Fatalf("records after a battery that did not run: %v %v", set, err)
	}
}

// Regression for #26 item 4: a missing program was bad-input (exit 120) on
// native and exit 127 on the container backends.
func TestMissingProgramExits127(t *testing.T) {
	for argv0, want := range map[string]string{
		"/nope": "wovyr: fork/exec /nope: no such file or directory\n",
		"nope":  "wovyr: nope: command not found\n",
	} {
		o := wovyr(t, "", "run", "--trust", "trusted", "--", argv0)
		if o.code != 127 || o.stderr != want || o.stdout != "" {
			t.Errorf("run %s: %+v, want exit 127 and stderr %q", argv0, o, want)
		}
	}
}

// Regression for #26 item 5: an invalid module printed Wasmtime's
// multi-line report, the magic bytes one per line.
func TestInvalidWasmModuleIsOneLine(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.wasm")
	if err := os.WriteFile(bad, []byte("hello world\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := wovyr(t, "", "wasm-exec", bad)
	want := "wasm-exec: bad-input: invalid wasm module: not a WebAssembly module: bad magic number\n"
	if o.code != exitBadInput || o.stderr != want {
		t.Fatalf("wasm-exec of a text file: %+v, want exit %d and stderr %q", o, exitBadInput, want)
	}
}
