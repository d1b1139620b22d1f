package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"time"

	"github.com/wovyr/wovyr/store"
)

// The CLI is tested as users run it: a built binary, a real state dir, a
// real certification of the native backend.
var (
	wovyrBin string
	stateDir string
	// certifiedDB is a copy of the state store right after the native
	// backend's certification: no probe answer stored yet.
	certifiedDB string
)

func TestMain(m *testing.M) {
	os.Exit(func() int {
		if os.Geteuid() != 0 {
			println("cmd/wovyr tests need root (CI runs as root)")
			return 1
		}
		dir, err := os.MkdirTemp("", "wovyr-cli-test-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		os.Chmod(dir, 0o755)
		wovyrBin = filepath.Join(dir, "wovyr")
		stateDir = filepath.Join(dir, "state")
		for _, b := range []struct{ out, pkg, cgo string }{
			{wovyrBin, ".", "1"},
			{filepath.Join(dir, "wovyr-guest"), "../wovyr-guest", "0"},
		} {
			cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo)
			if out, err := cmd.CombinedOutput(); err != nil {
				println(string(out))
				panic(err)
			}
		}
		if out, err := exec.Command(wovyrBin, "--state-dir", stateDir, "certify", "--backend", "native").CombinedOutput(); err != nil {
			println(string(out))
			panic(err)
		}
		certifiedDB = filepath.Join(dir, "certified.db")
		if err := copyFile(filepath.Join(stateDir, "wovyr.db"), certifiedDB); err != nil {
			panic(err)
		}
		defer vmEnv.Cleanup()
		return m.Run()
	}())
}

type outcome struct {
	stdout, stderr string
	code           int
}

func wovyr(t *testing.T, stdin string, args ...string) outcome {
	t.Helper()
	cmd := exec.Command(wovyrBin, append([]string{"--state-dir", stateDir}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return outcome{out.String(), errb.String(), code}
}

func TestRunTrustedEcho(t *testing.T) {
	o := wovyr(t, "", "run", "--trust", "trusted", "--", "/bin/echo", "hi")
	if o.stdout != "hi\n" || o.code != 0 {
		t.Fatalf("got %+v, want hi and exit 0", o)
	}
}

func TestRunPassesExitCodeStdinAndEnv(t *testing.T) {
	o := wovyr(t, "in", "run", "--trust", "trusted", "--env", "X=1", "--", "/bin/sh", "-c", `cat; echo " $X"; exit 7`)
	if o.stdout != "in 1\n" || o.code != 7 {
		t.Fatalf("got %+v, want 'in 1' and exit 7", o)
	}
}

func TestUntrustedIsRefusedAndRunsNothing(t *testing.T) {
	marker := "wovyr-cli-untrusted-marker"
	o := wovyr(t, "", "run", "--trust", "untrusted", "--", "/bin/sh", "-c", "touch /tmp/"+marker)
	if o.code != exitFloorUnmet || !strings.Contains(o.stderr, "floor-unmet: no usable backend at or above gvisor") {
		t.Fatalf("got %+v, want exit %d and the floor error", o, exitFloorUnmet)
	}
	if _, err := os.Stat("/tmp/" + marker); err == nil {
		os.Remove("/tmp/" + marker)
		t.Fatal("the refused workload ran")
	}
}

func TestBadInputExitCodes(t *testing.T) {
	for name, args := range map[string][]string{
		"empty argv":        {"run", "--trust", "trusted", "--"},
		"unknown trust":     {"run", "--trust", "root", "--", "/bin/true"},
		"negative memory":   {"run", "--trust", "trusted", "--memory", "-5M", "--", "/bin/true"},
		"unknown backend":   {"run", "--backend", "firecracker", "--", "/bin/true"},
		"negative timeout":  {"run", "--trust", "trusted", "--timeout", "-1s", "--", "/bin/true"},
		"unknown floor":     {"run", "--trust", "trusted", "--floor", "vm", "--", "/bin/true"},
		"init without wasm": {"run", "--trust", "trusted", "--init", "init", "--", "/bin/true"},
	} {
		o := wovyr(t, "", args...)
		if o.code != exitBadInput || !strings.Contains(o.stderr, "bad-input") {
			t.Errorf("%s: got %+v, want exit %d with a bad-input error", name, o, exitBadInput)
		}
	}
}

func TestTimeoutAndOOMExitCodes(t *testing.T) {
	o := wovyr(t, "", "run", "--trust", "trusted", "--timeout", "300ms", "--", "/bin/sleep", "30")
	if o.code != exitTimeout || !strings.Contains(o.stderr, "timeout") {
		t.Fatalf("timeout: %+v", o)
	}
	o = wovyr(t, "", "run", "--trust", "trusted", "--memory", "32M", "--", "/bin/sh", "-c", `x=$(head -c 100000000 /dev/zero | tr '\0' a)`)
	if o.code != exitOOM || !strings.Contains(o.stderr, "oom") {
		t.Fatalf("oom: %+v", o)
	}
}

func TestJSONResultAndRecord(t *testing.T) {
	o := wovyr(t, "", "run", "--json", "--trust", "trusted", "--", "/bin/echo", "rec")
	var res struct {
		ID      string `json:"id"`
		Backend string `json:"backend"`
		Stdout  []byte `json:"stdout"`
	}
	if err := json.Unmarshal([]byte(o.stdout), &res); err != nil || res.Backend != "native" || string(res.Stdout) != "rec\n" {
		t.Fatalf("json %q: %v %+v", o.stdout, err, res)
	}
	s, err := store.Open(stateDir, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rec, err := s.Get(res.ID)
	if err != nil || rec.State != store.Done || rec.Backend != "native" || rec.Result == nil {
		t.Fatalf("record %+v %v", rec, err)
	}
}

func TestBackendsListsCertifiedNative(t *testing.T) {
	o := wovyr(t, "", "backends")
	if o.code != 0 || !hasRow(o.stdout, "native", "yes", "yes") {
		t.Fatalf("backends:\n%s", o.stdout)
	}
}

// hasRow reports whether a table row has name, available and certified as given.
func hasRow(s string, fields ...string) bool {
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) >= len(fields)+1 && f[0] == fields[0] && f[2] == fields[1] && f[3] == fields[2] {
			return true
		}
	}
	return false
}

func TestBackendBelowTheFloorIsRefused(t *testing.T) {
	o := wovyr(t, "", "run", "--trust", "untrusted", "--backend", "native", "--", "/bin/true")
	if o.code != exitFloorUnmet || !strings.Contains(o.stderr, "native: below the required strength gvisor (trust untrusted)") {
		t.Fatalf("got %+v", o)
	}
}
