package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/store"
)

// asUser runs the wovyr binary as uid/gid 65534 with HOME=home and no
// other environment (so the state dir is the per-user default unless args
// name one).
func asUser(t *testing.T, home string, args ...string) outcome {
	t.Helper()
	cmd := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", wovyrBin}, args...)...)
	cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return outcome{out.String(), errb.String(), exitCode(err)}
}

// helloWAT writes "hello\n".
const helloWAT = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "hello\n")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 6))
    (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))`

// wasmCerts reads the wasm records in the state dir, by unprivileged.
func wasmCerts(t *testing.T, state string) map[bool]cert.Record {
	t.Helper()
	s, err := store.Open(state, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs, err := s.Certs()
	if err != nil {
		t.Fatal(err)
	}
	m := map[bool]cert.Record{}
	for _, r := range recs {
		if r.Backend == "wasm" {
			m[r.Unprivileged] = r
		}
	}
	return m
}

// Issue #26 item 3: without root, wovyr offers the wasm backend in its
// unprivileged mode — certified as that mode, never on root's record — and
// refuses the rest with the root message.
func TestUnprivilegedWasm(t *testing.T) {
	home, err := os.MkdirTemp("", "wovyr-nobody-home-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(home)
	state := filepath.Join(home, ".local", "state", "wovyr") // the per-user default
	mod, err := wasmtime.Wat2Wasm(helloWAT)
	if err != nil {
		t.Fatal(err)
	}
	hello, input := filepath.Join(home, "hello.wasm"), filepath.Join(home, "in.txt")
	for p, b := range map[string][]byte{hello: mod, input: []byte("x")} {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Root certifies wasm on that state dir first: a root-mode record.
	if out, err := exec.Command(wovyrBin, "--state-dir", state, "certify", "--backend", "wasm").CombinedOutput(); err != nil {
		t.Fatalf("certify as root: %v\n%s", err, out)
	}
	if out, err := exec.Command("chown", "-R", "65534:65534", home).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}

	// Root's record is not honoured without root.
	refused := asUser(t, home, "run", "--wasm", hello)
	if o := asUser(t, home, "certify", "--backend", "wasm"); o.code != 0 || !strings.HasSuffix(o.stderr, "\nwasm: certified (18 probes passed with flagged controls, 23 rows not applicable)\n") {
		t.Fatalf("certify --backend wasm as nobody: %+v", o)
	}
	recs := wasmCerts(t, state)
	root, unpriv := recs[false], recs[true]
	if !root.Passed || !unpriv.Passed || root.ConfigHash == unpriv.ConfigHash {
		t.Fatalf("records: root %+v\nunprivileged %+v", root.Key, unpriv.Key)
	}
	want := "wovyr: floor-unmet: no usable backend at or above wasm for a wasm workload; wasm: not certified: certified with config " +
		root.ConfigHash + ", now " + unpriv.ConfigHash + ": run wovyr certify --backend wasm; container: does not run wasm workloads; gvisor: does not run wasm workloads; microvm: does not run wasm workloads\n"
	if refused.code != exitFloorUnmet || refused.stderr != want || refused.stdout != "" {
		t.Errorf("run as nobody on root's certification: %+v\nwant exit %d and stderr %q", refused, exitFloorUnmet, want)
	}
	for _, o := range unpriv.Outcomes {
		if o.ID == 52 && (o.Applies || !strings.HasPrefix(o.Why, "unprivileged mode has no workspace")) {
			t.Errorf("row 52 unprivileged: %+v", o)
		}
	}

	if o := asUser(t, home, "run", "--trust", "trusted", "--wasm", hello); o.code != 0 || o.stdout != "hello\n" || o.stderr != "" {
		t.Errorf("trusted wasm run as nobody: %+v", o)
	}
	want = "wovyr: policy-unenforceable (workload.files): files in or out need a workspace with a disk quota (a tmpfs mount, which needs root): the wasm backend runs without root here, so it has no workspace (run wovyr as root, or through a daemon with --remote)\n"
	if o := asUser(t, home, "run", "--wasm", hello, "--file", "in.txt="+input); o.code != exitUnenforceable || o.stderr != want || o.stdout != "" {
		t.Errorf("wasm run with a file as nobody: %+v\nwant exit %d and stderr %q", o, exitUnenforceable, want)
	}
	if ents, err := os.ReadDir(filepath.Join(state, "wasm", "work")); err != nil || len(ents) != 0 {
		t.Errorf("workspaces left: %v %v", ents, err)
	}
	want = "wovyr: wovyr run of a command needs root (this is uid 65534).\n" + rootHelp()
	if o := asUser(t, home, "run", "--trust", "trusted", "--", "/bin/true"); o.code != exitBackendFailure || o.stderr != want {
		t.Errorf("command run as nobody: %+v\nwant exit %d and stderr %q", o, exitBackendFailure, want)
	}
	o := asUser(t, home, "backends")
	if o.code != 0 || !hasRow(o.stdout, "wasm", "yes", "yes") {
		t.Errorf("backends as nobody: %+v", o)
	}
	for _, n := range rootNeeds {
		name := n.strength.String()
		if name == "wasm" {
			continue
		}
		if !hasRow(o.stdout, name, "no", "no") || !strings.Contains(o.stdout, "needs root: "+n.what+"\n") {
			t.Errorf("backends as nobody: no %s row saying it needs root:\n%s", name, o.stdout)
		}
	}
	want = "wovyr: native: not certified, the battery did not run: unavailable: needs root: " + rootNeeds[0].what + "\n"
	if o := asUser(t, home, "certify", "--backend", "native"); o.code != exitBackendFailure || !strings.HasSuffix(o.stderr, want) {
		t.Errorf("certify --backend native as nobody: %+v\nwant exit %d, stderr ending %q", o, exitBackendFailure, want)
	}
	// Without a home, the run says where its state dir would be.
	want = "wovyr: backend-failure: start: state dir /nonexistent/.local/state/wovyr: mkdir /nonexistent: permission denied; without root the state dir is $XDG_STATE_HOME/wovyr, else $HOME/.local/state/wovyr: give --state-dir DIR (or WOVYR_STATE_DIR) a directory this user can write\n"
	if o := asUser(t, "/nonexistent", "run", "--wasm", hello); o.code != exitBackendFailure || o.stderr != want {
		t.Errorf("run as nobody without a home: %+v\nwant exit %d and stderr %q", o, exitBackendFailure, want)
	}
}
