package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
)

// buildBinaries builds wovyr and the static wovyr-guest into a directory
// every uid can read.
func buildBinaries(t *testing.T) (wovyr, guest string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the daemon tests need root (CI runs as root)")
	}
	dir, err := os.MkdirTemp("", "wovyr-bin-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	wovyr, guest = filepath.Join(dir, "wovyr"), filepath.Join(dir, "wovyr-guest")
	for _, b := range []struct{ out, pkg, cgo string }{{wovyr, ".", "1"}, {guest, "../wovyr-guest", "0"}} {
		cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return wovyr, guest
}

// certifiedNative builds the binaries and a fresh state dir (removed when
// t ends) in which native is certified.
func certifiedNative(t *testing.T, prefix string) (wovyr, state string) {
	t.Helper()
	wovyr, guest := buildBinaries(t)
	state, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(state, 0o711)
	t.Cleanup(func() { os.RemoveAll(state) })
	if out, err := exec.Command(wovyr, "--state-dir", state, "--guest", guest, "certify", "--backend", "native").CombinedOutput(); err != nil {
		t.Fatalf("certify: %v\n%s", err, out)
	}
	return wovyr, state
}

// daemon is a `wovyr serve` subprocess.
type daemon struct {
	cmd  *exec.Cmd
	log  *bytes.Buffer
	url  string
	done chan struct{}
}

func startDaemon(t *testing.T, wovyr, state string) *daemon {
	t.Helper()
	// Other tests on this host may run sandboxes now: reconcile only ours.
	return startDaemonConfig(t, wovyr, state, `{"cgroup_reconcile": "owned", "tenants": []}`)
}

// startDaemonConfig is startDaemon with this configuration file.
func startDaemonConfig(t *testing.T, wovyr, state, config string) *daemon {
	t.Helper()
	addrFile := filepath.Join(state, "addr")
	os.Remove(addrFile)
	d := &daemon{log: &bytes.Buffer{}, done: make(chan struct{})}
	conf := filepath.Join(state, "serve.json")
	if err := os.WriteFile(conf, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	d.cmd = exec.Command(wovyr, "--state-dir", state, "serve", "--listen", "127.0.0.1:0", "--addr-file", addrFile, "--config", conf)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() { d.stop(t) })
	for i := 0; i < 500; i++ {
		if b, err := os.ReadFile(addrFile); err == nil {
			d.url = "http://" + strings.TrimSpace(string(b))
			return d
		}
		select {
		case <-d.done:
			t.Fatalf("wovyr serve exited:\n%s", d.log)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("wovyr serve never listened:\n%s", d.log)
	return nil
}

// stop asks for a graceful shutdown and waits for it.
func (d *daemon) stop(t *testing.T) {
	select {
	case <-d.done:
		return
	default:
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		d.cmd.Process.Kill()
		t.Errorf("wovyr serve ignored SIGTERM:\n%s", d.log)
	}
}

// pidsOf returns the processes whose command line contains pattern.
func pidsOf(pattern string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.Contains(string(b), pattern) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestCrashRestartMarksLost kills the daemon with SIGKILL in the middle of
// an invocation and restarts it on the same state dir: the invocation reads
// lost/daemon-restart, its process is gone, finished records survive. Then,
// on the same certified node: a local run beside the daemon fails fast, and
// `wovyr run --remote` prints and exits exactly as a local run.
func TestCrashRestartMarksLost(t *testing.T) {
	wovyr, state := certifiedNative(t, "wovyr-crash-test-")

	d := startDaemon(t, wovyr, state)
	tok, err := os.ReadFile(filepath.Join(state, tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(d.url, strings.TrimSpace(string(tok)), nil)
	ctx := context.Background()
	inv := func(argv ...string) *sandbox.Invocation {
		return &sandbox.Invocation{Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: argv}, Policy: sandbox.Policy{Trust: sandbox.Trusted}}
	}
	finished, err := c.Submit(ctx, inv("/bin/echo", "survives"), 30*time.Second)
	if err != nil || finished.State != client.StateDone {
		t.Fatalf("finished run: %+v %v", finished, err)
	}

	// The workload's leader sleeps `secs`; it also leaves a detached
	// sleeper of `orphanSecs` that only its cgroup still ties to it.
	secs := fmt.Sprintf("300.%d", time.Now().UnixNano()%1000000)
	orphanSecs := fmt.Sprintf("301.%d", time.Now().UnixNano()%1000000)
	pattern := "sleep\x00" + secs + "\x00"
	orphan := "sleep\x00" + orphanSecs + "\x00"
	t.Cleanup(func() {
		for _, pid := range append(pidsOf(pattern), pidsOf(orphan)...) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	running, err := c.Submit(ctx, inv("/bin/sh", "-c", "(setsid /bin/sleep "+orphanSecs+" &); exec /bin/sleep "+secs), 0)
	if err != nil {
		t.Fatal(err)
	}
	// Bounded generously: on a loaded machine the claim can wait its turn
	// for seconds (it once stayed queued past 5 s in a full run).
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !(confined(pidsOf(pattern)) && confined(pidsOf(orphan))); {
		time.Sleep(10 * time.Millisecond)
	}
	if rec, err := c.Get(ctx, running.ID, 0); err != nil || rec.State != client.StateRunning || !confined(pidsOf(pattern)) || !confined(pidsOf(orphan)) {
		t.Fatalf("the sleeps are not running: %+v %v", rec, err)
	}

	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
	// The leader dies with the daemon (its parent-death signal); the
	// detached sleeper does not, and only reconcile can find it.
	for i := 0; i < 200 && len(pidsOf(pattern)) > 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if len(pidsOf(pattern)) != 0 {
		t.Fatal("the workload's leader outlived the daemon")
	}
	if len(pidsOf(orphan)) == 0 {
		t.Fatal("the detached sleeper died with the daemon; the test would prove nothing about reconcile")
	}
	pattern = orphan

	d = startDaemon(t, wovyr, state)
	rec, err := c2(d, tok).Get(ctx, running.ID, 0)
	if err != nil || rec.State != client.StateLost || rec.Result == nil || rec.Result.Class != sandbox.Lost || rec.Result.Error != "daemon-restart" {
		t.Fatalf("after restart: %+v %v", rec, err)
	}
	if pids := pidsOf(pattern); len(pids) != 0 {
		t.Fatalf("the lost invocation's process survived reconcile: %v\n%s", pids, d.log)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), filepath.Join(state, "scratch")) {
		t.Fatal("the lost invocation's workspace is still mounted")
	}
	rec, err = c2(d, tok).Get(ctx, finished.ID, 0)
	if err != nil || rec.State != client.StateDone || string(rec.Result.Stdout) != "survives\n" {
		t.Fatalf("finished record after restart: %+v %v", rec, err)
	}
	// Never re-run: it stays lost.
	time.Sleep(100 * time.Millisecond)
	if len(pidsOf(pattern)) != 0 {
		t.Fatal("the lost invocation was re-run")
	}
	// While the daemon holds the state, a local run fails fast and says why.
	start := time.Now()
	out, err := exec.Command(wovyr, "--state-dir", state, "run", "--trust", "trusted", "--", "/bin/true").CombinedOutput()
	if code := exitCode(err); code != exitBackendFailure || !strings.Contains(string(out), "--remote") || time.Since(start) > 5*time.Second {
		t.Fatalf("local run beside the daemon: exit %d after %s: %s", code, time.Since(start), out)
	}

	// Certification through the API (admin; the daemon finds wovyr-guest
	// beside its binary).
	rec2, err := c2(d, tok).Certify(ctx, "native")
	if err != nil || !rec2.Passed || rec2.Backend != "native" {
		t.Fatalf("certify through the API: %+v %v", rec2.Key, err)
	}

	// wovyr run --remote prints what a local run prints and exits alike.
	cases := [][]string{
		{"--trust", "trusted", "--", "/bin/sh", "-c", "echo out; echo err >&2; exit 3"},
		{"--trust", "untrusted", "--", "/bin/true"},
		{"--trust", "trusted", "--", "no-such-tool"},
		{"--trust", "trusted", "--timeout", "200ms", "--", "/bin/sleep", "5"},
		{"--trust", "trusted", "--memory", "10", "--", "/bin/true"},
		{"--trust", "trusted", "--json", "--", "/bin/sh", "-c", "exit 4"},
	}
	type outcome struct {
		stdout, stderr string
		code           int
	}
	run := func(args ...string) outcome {
		cmd := exec.Command(wovyr, append([]string{"--state-dir", state, "run"}, args...)...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		return outcome{o.String(), e.String(), exitCode(err)}
	}
	var remote []outcome
	for _, args := range cases {
		remote = append(remote, run(append([]string{"--remote", d.url}, args...)...))
	}
	d.stop(t)
	for i, args := range cases {
		local := run(args...)
		r := remote[i]
		if strings.Contains(strings.Join(args, " "), "--json") { // ids, timings and digests differ
			var lj, rj struct {
				ExitCode int    `json:"exit_code"`
				Backend  string `json:"backend"`
			}
			json.Unmarshal([]byte(local.stdout), &lj)
			json.Unmarshal([]byte(r.stdout), &rj)
			local.stdout, r.stdout = fmt.Sprint(lj), fmt.Sprint(rj)
		}
		t.Logf("wovyr run %v: %+v", args, local)
		// What the daemon tells a tenant names no host detail (#26 item
		// 2); the local run is the operator's and keeps it.
		if strings.Contains(r.stderr, state) || absPathRE.MatchString(r.stderr) || strings.Contains(r.stderr, "wovyr image build") {
			t.Errorf("wovyr run --remote %v shows host details: %q", args, r.stderr)
		}
		if args[1] == "untrusted" {
			want := "wovyr: floor-unmet: no usable backend at or above gvisor for a command workload"
			if !strings.HasPrefix(r.stderr, want) || !strings.HasPrefix(local.stderr, want) || !strings.Contains(r.stderr, "on this node") {
				t.Errorf("floor-unmet:\nlocal  %q\nremote %q", local.stderr, r.stderr)
			}
			local.stderr, r.stderr = "", ""
		}
		if local != r {
			t.Errorf("wovyr run %v:\nlocal  %+v\nremote %+v", args, local, r)
		}
	}
}

// absPathRE finds an absolute path in a message: a slash that starts a word.
var absPathRE = regexp.MustCompile(`(^|[\s"'(\[=:,;])/[^\s"']`)

// confined reports whether pids is one process, no longer traced, and in
// wovyr's cgroups (freezer and pids on v1).
func confined(pids []int) bool {
	if len(pids) != 1 {
		return false
	}
	st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pids[0]))
	cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pids[0]))
	v1 := strings.Contains(string(cg), ":freezer:/wovyr/") && strings.Contains(string(cg), ":pids:/wovyr/")
	v2 := strings.Contains(string(cg), "0::/wovyr/")
	return strings.Contains(string(st), "TracerPid:\t0\n") && (v1 || v2)
}

func c2(d *daemon, tok []byte) *client.Client {
	return client.New(d.url, strings.TrimSpace(string(tok)), nil)
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
