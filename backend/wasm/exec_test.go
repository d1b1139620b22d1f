package wasm

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/wovyr/wovyr/sandbox"
)

// wasmExec runs the test binary as `wovyr wasm-exec` (see TestMain).
func wasmExec(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-state", sharedState}, args...)...)
	cmd.Env = []string{execHelperEnv + "=1", "HOST_SECRET=leak", "TMPDIR=" + t.TempDir()}
	cmd.Stdin = bytes.NewBufferString(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

func writeGuest(t *testing.T, name string) string {
	p := filepath.Join(t.TempDir(), filepath.Base(name)+".wasm")
	if err := os.WriteFile(p, guest(t, name), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExecPassesStdioArgsEnvAndExitCode(t *testing.T) {
	g := writeGuest(t, "goguest")
	out, errOut, code := wasmExec(t, "piped in", g, "--", "stdin")
	if out != "piped in" || code != 0 {
		t.Fatalf("stdin: %q %q exit %d", out, errOut, code)
	}
	out, _, code = wasmExec(t, "", "-argv0", "tool", "-env", "A=1", g, "--", "env")
	if out != "[\"A=1\"]\n" || code != 0 {
		t.Fatalf("env: %q exit %d (the host env must not leak)", out, code)
	}
	out, _, _ = wasmExec(t, "", "-argv0", "tool", g, "--", "args", "x y")
	if out != "[\"tool\",\"args\",\"x y\"]\n" {
		t.Fatalf("args: %q", out)
	}
	if _, _, code = wasmExec(t, "", g, "--", "exit", "42"); code != 42 {
		t.Fatalf("exit code %d, want 42", code)
	}
}

func TestExecLimitsAndReport(t *testing.T) {
	spin := writeGuest(t, "wat/spin")
	report := filepath.Join(t.TempDir(), "report.json")
	if _, _, code := wasmExec(t, "", "-wall", "100ms", "-report", report, spin); code != ExitTimeout {
		t.Fatalf("timeout exit %d", code)
	}
	var res sandbox.Result
	if b, err := os.ReadFile(report); err != nil || json.Unmarshal(b, &res) != nil || res.Class != sandbox.Timeout {
		t.Fatalf("report %+v: %v", res, err)
	}
	if _, _, code := wasmExec(t, "", "-fuel", "10000", spin); code != ExitOutOfFuel {
		t.Fatalf("fuel exit %d", code)
	}
	if _, _, code := wasmExec(t, "", "-memory-mib", "16", writeGuest(t, "c/hog")); code != 12 {
		t.Fatalf("hog exit %d, want its own 12", code)
	}
	bad := filepath.Join(t.TempDir(), "bad.wasm")
	os.WriteFile(bad, []byte("not wasm"), 0o644)
	if _, errOut, code := wasmExec(t, "", bad); code != ExitBadInput || !bytes.Contains([]byte(errOut), []byte("invalid wasm module")) {
		t.Fatalf("invalid module: exit %d %q", code, errOut)
	}
}

func TestExecWorkDirIsReadWrite(t *testing.T) {
	work := t.TempDir()
	g := writeGuest(t, "goguest")
	if _, _, code := wasmExec(t, "", "-work", work, g, "--", "write", "/workspace/out.txt", "done"); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if b, _ := os.ReadFile(filepath.Join(work, "out.txt")); string(b) != "done" {
		t.Fatalf("out.txt %q", b)
	}
}

// TestRunnerLinksStatically builds wasm-exec as a static binary (the form the
// container, gVisor and microVM backends copy into their root filesystems)
// and runs a module with it inside an empty chroot.
func TestRunnerLinksStatically(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (chroot)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "root", "wasm-exec")
	os.MkdirAll(filepath.Join(dir, "root", "state"), 0o700)
	os.MkdirAll(filepath.Join(dir, "root", "work"), 0o700)
	build := exec.Command("go", "build", "-o", bin, "-ldflags", "-linkmode external -extldflags -static", "./testdata/runner")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("static build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Fatalf("not static: program header %v", p.Type)
		}
	}
	f.Close()
	os.WriteFile(filepath.Join(dir, "root", "g.wasm"), guest(t, "goguest"), 0o644)
	cmd := exec.Command("chroot", filepath.Join(dir, "root"), "/wasm-exec", "-state", "/state", "-work", "/work", "/g.wasm", "--", "write", "/workspace/out", "static")
	cmd.Env = []string{}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("run in an empty chroot: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "root", "work", "out")); string(b) != "static" {
		t.Fatalf("out %q", b)
	}
}

// TestExecBoundsDescriptors: the runner bounds its own RLIMIT_NOFILE, so a
// guest opening files under -work meets EMFILE (errno io) near -nofile.
func TestExecBoundsDescriptors(t *testing.T) {
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "probe.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	g := filepath.Join(t.TempDir(), "open.wasm")
	if err := os.WriteFile(g, mustWat(t, openGuest(1000, false)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := wasmExec(t, "", "-nofile", "40", "-work", work, g)
	m := guestLines([]byte(out))
	n, _ := strconv.Atoi(m["opened"])
	if code != 0 || n > 40 || n < 40-fdSlack || m["errno"] != strconv.Itoa(eIO) {
		t.Fatalf("opened %d errno %s exit %d: %q %q", n, m["errno"], code, out, errOut)
	}
}

// TestExecNamesTheInitExport: the runner (what the container and gVisor
// backends run) pre-initialises with -init as Sandbox.Run does.
func TestExecNamesTheInitExport(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.wasm")
	if err := os.WriteFile(p, stateModule(t, "init"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{{nil, lazyOut}, {[]string{"-init", "init"}, snapOut}} {
		out, errOut, code := wasmExec(t, "", append(c.args, p)...)
		if out != c.want || errOut != "" || code != 0 {
			t.Fatalf("%v: stdout %q stderr %q exit %d", c.args, out, errOut, code)
		}
	}
	if _, errOut, code := wasmExec(t, "", "-init", "nope", p); code != ExitBadInput || errOut != "wasm-exec: bad-input (workload.init): the module does not have a \"nope\" export\n" {
		t.Fatalf("stderr %q exit %d", errOut, code)
	}
}
