package server_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/backend/microvm"
	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/internal/vmtest"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
	"github.com/wovyr/wovyr/vmm"
)

// vmEnv is the microVM image this package's tests boot, built once.
var vmEnv vmtest.Builder

// microVMSessions adds a warm microVM backend of vmEnv's image, with a
// stub certification, to a harness.
func microVMSessions(t testing.TB) func(dir string, st *store.Store) []sandbox.Backend {
	e := vmEnv.Get(t)
	return func(dir string, st *store.Store) []sandbox.Backend {
		t.Helper()
		state := filepath.Join(dir, "microvm")
		if err := os.Mkdir(state, 0o700); err != nil {
			t.Fatal(err)
		}
		b, err := microvm.New(microvm.Config{StateDir: state, ImageDir: e.Image.Dir, Warm: true})
		if err != nil {
			t.Fatal(err)
		}
		capa := b.Probe(context.Background())
		if !capa.Available {
			t.Fatalf("microvm backend unavailable: %s", capa.Reason)
		}
		rec := cert.Record{Key: cert.Key{Backend: b.Name(), RuntimeVersion: capa.Version, Kernel: cert.Kernel(), ConfigHash: capa.ConfigHash},
			Passed: true, Outcomes: []cert.Outcome{{ID: 1, Name: "stub for the session API test", Applies: true, Pass: true, ControlFlagged: true}}, At: time.Now()}
		if err := st.PutCert(rec); err != nil {
			t.Fatal(err)
		}
		return []sandbox.Backend{b}
	}
}

// TestSessionEndToEndMicroVM is issue 21's agent-style scenario on the
// microVM, through the HTTP API: a hostile tenant's session lands on the
// microVM (its floor); it writes a program, runs it, streams an exec's
// output while it runs, keeps a background process that takes stdin,
// pauses by snapshot and resumes on the next exec with its file and its
// process (same pid, still counting), refuses another tenant with the 404
// of a missing session, and once deleted leaves no VM, directory or saved
// snapshot on the host.
func TestSessionEndToEndMicroVM(t *testing.T) {
	h := startHarness(t, testConfig(), "", microVMSessions(t), nil)
	// A fresh daemon is ready once its microVM pool holds a clone: a
	// golden captured and restored under TCG takes seconds.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(h.url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("daemon never became ready")
		}
	}
	ctx := context.Background()
	alice, bob := h.client(aliceToken), h.client(bobToken)
	s, err := alice.CreateSession(ctx, &client.SessionRequest{Policy: sandbox.Policy{Trust: sandbox.Hostile},
		Limits: sandbox.Limits{Wall: 20 * time.Second}, IdleTimeout: time.Minute})
	if err != nil || s.Backend != "microvm" || s.State != client.SessionRunning {
		t.Fatalf("create: %+v %v", s, err)
	}
	if err := alice.Upload(ctx, s.ID, "main.sh", []byte("echo hello $1 > out.txt\ncat out.txt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := alice.Exec(ctx, s.ID, &sandbox.Exec{Argv: []string{"sh", "main.sh", "agent"}})
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "hello agent\n" || res.Backend != "microvm" {
		t.Fatalf("exec: %+v %v", res, err)
	}
	if got, err := alice.Download(ctx, s.ID, "out.txt"); err != nil || string(got) != "hello agent\n" {
		t.Fatalf("download: %q %v", got, err)
	}
	first := sessionVM(t, alice, h.dir, s.ID)

	// Live output: the first chunk arrives a second before the exit.
	if _, err := alice.StartExec(ctx, s.ID, &sandbox.Exec{ID: "e1", Argv: []string{"sh", "-c", "echo first; sleep 2; echo second"}}); err != nil {
		t.Fatal(err)
	}
	var firstAt, exitAt time.Time
	var out bytes.Buffer
	err = alice.ExecEvents(ctx, s.ID, "e1", 0, func(ev client.Event) error {
		switch ev.Type {
		case client.EventStdout:
			if firstAt.IsZero() {
				firstAt = time.Now()
			}
			out.Write(ev.Data)
		case client.EventExit:
			exitAt = time.Now()
		}
		return nil
	})
	if err != nil || out.String() != "first\nsecond\n" || firstAt.IsZero() || exitAt.Sub(firstAt) < time.Second {
		t.Fatalf("live: %v %q, first chunk %v before the exit", err, out.String(), exitAt.Sub(firstAt))
	}

	// A background process, with stdin, through the pause.
	bg, err := alice.StartBackground(ctx, s.ID, &sandbox.Exec{ID: "ticker", Argv: []string{"sh", "-c", "while :; do echo tick; sleep 0.2; done"}, Background: true})
	if err != nil || bg.Pid <= 1 {
		t.Fatalf("background: %+v %v", bg, err)
	}
	if _, err := alice.StartBackground(ctx, s.ID, &sandbox.Exec{ID: "cat", Argv: []string{"cat"}, Background: true, OpenStdin: true}); err != nil {
		t.Fatal(err)
	}
	if w, err := alice.WriteStdin(ctx, s.ID, "cat", []byte("before\n"), false); err != nil || w.Written != 7 {
		t.Fatalf("stdin: %+v %v", w, err)
	}
	p, err := alice.PauseSession(ctx, s.ID)
	if err != nil || p.State != client.SessionPaused || p.Resume != "snapshot" {
		t.Fatalf("pause: %+v %v", p, err)
	}
	assertVMGone(t, h.dir, first)
	res, err = alice.Exec(ctx, s.ID, &sandbox.Exec{Argv: []string{"cat", "out.txt"}})
	if err != nil || string(res.Stdout) != "hello agent\n" {
		t.Fatalf("exec after the pause: %+v %v", res, err)
	}
	if v, err := alice.Session(ctx, s.ID); err != nil || v.State != client.SessionRunning || v.Resume != "snapshot" {
		t.Fatalf("resumed: %+v %v", v, err)
	}
	resumed := sessionVM(t, alice, h.dir, s.ID)
	if resumed == first {
		t.Fatalf("the resumed session runs in its first VM %s", first)
	}
	tick, err := alice.Process(ctx, s.ID, "ticker")
	if err != nil || tick.Pid != bg.Pid || tick.State != client.ExecRunning {
		t.Fatalf("the background process after the resume: %+v %v (pid before %d)", tick, err, bg.Pid)
	}
	if w, err := alice.WriteStdin(ctx, s.ID, "cat", []byte("after\n"), true); err != nil || w.Written != 6 || !w.Closed {
		t.Fatalf("stdin after the resume: %+v %v", w, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := alice.Process(ctx, s.ID, "cat")
		if err != nil {
			t.Fatal(err)
		}
		if c.State != client.ExecRunning {
			if c.Result == nil || string(c.Result.Stdout) != "before\nafter\n" {
				t.Fatalf("cat: %+v", c)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cat still runs after its stdin closed: %+v", c)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Bob sees a missing session, whatever he asks.
	for _, route := range sessionRoutes() {
		r1, b1 := h.raw(route.method, strings.ReplaceAll(route.path, "ID", s.ID), bobToken, strings.NewReader(route.body), nil)
		r2, b2 := h.raw(route.method, strings.ReplaceAll(route.path, "ID", strings.Repeat("0", 32)), bobToken, strings.NewReader(route.body), nil)
		if r1.StatusCode != 404 || r2.StatusCode != 404 || string(b1) != strings.ReplaceAll(string(b2), strings.Repeat("0", 32), s.ID) {
			t.Errorf("bob %s %s: %d %s", route.method, route.path, r1.StatusCode, b1)
		}
	}
	if l, err := bob.Sessions(ctx); err != nil || len(l) != 0 {
		t.Fatalf("bob lists %v %v", l, err)
	}

	if end, err := alice.DeleteSession(ctx, s.ID); err != nil || end.State != client.SessionEnded {
		t.Fatalf("delete: %+v %v", end, err)
	}
	if saved, _ := filepath.Glob(filepath.Join(h.dir, "microvm", "snapshots", "paused", "microvm", "*")); len(saved) != 0 {
		t.Errorf("saved VMs left: %v", saved)
	}
	assertVMGone(t, h.dir, resumed)
}

// sessionVM is the name of the one VM of the harness whose scratch disk
// holds the session's out.txt (synced by an exec first).
func sessionVM(t *testing.T, c *client.Client, dir, id string) string {
	t.Helper()
	if _, err := c.Exec(context.Background(), id, &sandbox.Exec{Argv: []string{"sync"}}); err != nil {
		t.Fatal(err)
	}
	disks, _ := filepath.Glob(filepath.Join(dir, "microvm", "microvm", "wovyr-vm-*", "scratch.ext4"))
	var holders []string
	for _, d := range disks {
		if holds(t, d, []byte("hello agent\n")) {
			holders = append(holders, filepath.Base(filepath.Dir(d)))
		}
	}
	if len(holders) != 1 {
		t.Fatalf("VMs holding the session's file: %v (of %d)", holders, len(disks))
	}
	return holders[0]
}

// holds reports whether the sparse file path holds marker, reading only
// its data (SEEK_DATA).
func holds(t *testing.T, path string, marker []byte) bool {
	f, err := os.Open(path)
	if err != nil {
		return false // a VM that went meanwhile
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var off int64
	for {
		data, err := f.Seek(off, unix.SEEK_DATA)
		if err != nil {
			return false // no data past off
		}
		n, err := f.ReadAt(buf, data)
		if bytes.Contains(buf[:n], marker) {
			return true
		}
		if err != nil {
			return false
		}
		off = data + int64(n) - int64(len(marker)) // a marker across two reads
	}
}

// assertVMGone checks the host for VM name: no directory, no cgroup, no
// process in one.
func assertVMGone(t *testing.T, dir, name string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "microvm", "microvm", name)); err == nil {
		t.Errorf("VM directory %s left", name)
	}
	cgs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", vmm.CgroupParent, name))
	own, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", vmm.CgroupParent, name))
	if cgs = append(cgs, own...); len(cgs) > 0 {
		t.Errorf("cgroups of %s left: %v", name, cgs)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(name)) {
			t.Errorf("process %s is in a cgroup of %s", filepath.Base(filepath.Dir(p)), name)
		}
	}
}
