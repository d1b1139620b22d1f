package server_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
)

// tarFiles is an archive of files (name → content; a name ending in "/" a
// directory).
func tarFiles(t *testing.T, names []string, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		h := &tar.Header{Name: n, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(files[n]))}
		if n[len(n)-1] == '/' {
			h.Typeflag, h.Mode, h.Size = tar.TypeDir, 0o755, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, files[n])
	}
	tw.Close()
	return buf.Bytes()
}

// untar reads an archive's regular files (name → content) and its names.
func untar(t *testing.T, data []byte) (names []string, files map[string]string) {
	t.Helper()
	files = map[string]string{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names, files
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		b, _ := io.ReadAll(tr)
		if h.Typeflag == tar.TypeReg {
			files[h.Name] = string(b)
		}
	}
}

// archiveAndPause goes on from agentScenario's state (name holding data,
// out.txt holding "hello agent\n", in sandbox sbID): the workspace as a
// tar archive both ways, a refused archive that changes nothing, then a
// pause (the sandbox gone from the host) and a resume by the next request
// into a new sandbox with the workspace as it was. It returns the new
// sandbox's id.
func archiveAndPause(t *testing.T, h *harness, id, sbID, name string, data []byte) string {
	t.Helper()
	ctx := context.Background()
	alice := h.client(aliceToken)
	ar, err := alice.DownloadArchive(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	names, files := untar(t, ar)
	if slices.Sort(names); !slices.Equal(names, []string{name, "out.txt"}) || files[name] != string(data) || files["out.txt"] != "hello agent\n" {
		t.Fatalf("the workspace's archive: %v %q", names, files)
	}
	vendor := tarFiles(t, []string{"pkg/", "pkg/lib.txt"}, map[string]string{"pkg/lib.txt": "lib v1\n"})
	if err := alice.UploadArchive(ctx, id, "vendor", vendor); err != nil {
		t.Fatal(err)
	}
	if got, err := alice.Download(ctx, id, "vendor/pkg/lib.txt"); err != nil || string(got) != "lib v1\n" {
		t.Fatalf("an extracted file: %q %v", got, err)
	}
	bad := tarFiles(t, []string{"fine.txt", "../escape"}, map[string]string{"fine.txt": "x", "../escape": "x"})
	err = alice.UploadArchive(ctx, id, "", bad)
	var ce *client.Error
	if !errAs(err, &ce) || ce.Status != 400 || ce.Field != "path" || ce.Message != `bad-input (path): archive entry "../escape": path leaves the workspace` {
		t.Fatalf("an archive with a path out: %v", err)
	}
	workspace := func() []string {
		ents, err := alice.ListFiles(ctx, id, "")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range ents {
			out = append(out, e.Path)
		}
		return out
	}
	if got := workspace(); !slices.Equal(got, []string{name, "out.txt", "vendor"}) {
		t.Fatalf("the workspace after a refused archive: %v", got)
	}

	// gVisor pauses by snapshot (runsc checkpoint): its background
	// process survives. runc's sandbox cannot: its workspace is kept.
	before, _ := alice.Session(ctx, id)
	snap := before.Backend == "gvisor"
	bg, err := alice.StartBackground(ctx, id, &sandbox.Exec{ID: "sleeper", Argv: []string{"sleep", "600"}})
	if err != nil || bg.Pid <= 1 {
		t.Fatalf("background: %+v %v", bg, err)
	}
	p, err := alice.PauseSession(ctx, id)
	if err != nil || p.State != client.SessionPaused || p.PausedBytes < int64(len(data)) {
		t.Fatalf("pause: %+v %v", p, err)
	}
	assertSandboxGone(t, h.dir, sbID)
	kept, _ := os.ReadDir(filepath.Join(h.dir, "sessions"))
	saved, _ := filepath.Glob(filepath.Join(h.dir, "snapshots", "paused", "gvisor", "*"))
	if snap {
		if p.Resume != "snapshot" || len(kept) != 0 || len(saved) != 1 {
			t.Fatalf("a gVisor pause: resume %q, kept workspaces %v, saved sandboxes %v; want a snapshot only", p.Resume, kept, saved)
		}
	} else if p.Resume != "restart" || len(kept) != 1 || kept[0].Name() != id+".tar" || len(saved) != 0 {
		t.Fatalf("a container pause: resume %q, kept workspaces %v, saved sandboxes %v; want the workspace only", p.Resume, kept, saved)
	}
	if got := workspace(); !slices.Equal(got, []string{name, "out.txt", "vendor"}) {
		t.Fatalf("the workspace after the resume: %v", got)
	}
	if left, _ := filepath.Glob(filepath.Join(h.dir, "snapshots", "paused", "gvisor", "*")); len(left) != 0 {
		t.Errorf("saved sandboxes after the resume: %v", left)
	}
	ps, err := alice.Process(ctx, id, "sleeper")
	if snap && (err != nil || ps.State != "running" || ps.Pid != bg.Pid) {
		t.Fatalf("the background process after a snapshot resume: %+v %v, want running as pid %d", ps, err, bg.Pid)
	}
	if !snap && (err != nil || ps.State != "killed") {
		t.Fatalf("the background process after a restart resume: %+v %v, want killed", ps, err)
	}
	if snap {
		alive, err := alice.Exec(ctx, id, &sandbox.Exec{Argv: []string{"sh", "-c", fmt.Sprintf("test -d /proc/%d && echo alive", bg.Pid)}})
		if err != nil || string(alive.Stdout) != "alive\n" {
			t.Fatalf("pid %d after the resume: %+v %v", bg.Pid, alive, err)
		}
	}
	if _, err := alice.KillProcess(ctx, id, "sleeper"); err != nil && snap {
		t.Fatal(err)
	}
	res, err := alice.Exec(ctx, id, &sandbox.Exec{Argv: []string{"cat", "out.txt", "vendor/pkg/lib.txt"}})
	if err != nil || string(res.Stdout) != "hello agent\nlib v1\n" {
		t.Fatalf("exec after the resume: %+v %v", res, err)
	}
	s, _ := alice.Session(ctx, id)
	var tail []string
	for _, tr := range s.Transitions[len(s.Transitions)-2:] {
		tail = append(tail, tr.State+":"+tr.Reason)
	}
	if s.State != client.SessionRunning || !slices.Equal(tail, []string{"paused:requested", "running:resumed"}) {
		t.Fatalf("after the resume: %+v (%v)", s, tail)
	}
	next := sessionSandbox(t, h.dir, name)
	if next == sbID {
		t.Fatalf("resumed in the sandbox %s it paused out of", sbID)
	}
	return next
}

// TestSessionPausedSurvivesRestart: a paused session is paused after the
// daemon restarts, resumes with its files for its tenant, and is the
// missing session's 404 for another. A gVisor session, paused by
// snapshot, also keeps its background process through the restart, and
// start-up discards a saved sandbox no session owns but not the session's.
func TestSessionPausedSurvivesRestart(t *testing.T) {
	for _, c := range []struct {
		backend string
		trust   sandbox.TrustClass
	}{{"container", sandbox.Trusted}, {"gvisor", sandbox.Untrusted}} {
		t.Run(c.backend, func(t *testing.T) { pausedRestart(t, c.trust, c.backend == "gvisor") })
	}
}

func pausedRestart(t *testing.T, trust sandbox.TrustClass, snap bool) {
	var img string
	dir := stateDir(t)
	h := newHarnessWith(t, testConfig(), dir, containerSessions(t, &img))
	ctx := context.Background()
	alice := h.client(aliceToken)
	s, err := alice.CreateSession(ctx, &client.SessionRequest{Policy: sandbox.Policy{Trust: trust}, Limits: sandbox.Limits{Wall: 20 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if err := alice.Upload(ctx, s.ID, "notes/plan.md", []byte("step 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bg, err := alice.StartBackground(ctx, s.ID, &sandbox.Exec{ID: "sleeper", Argv: []string{"sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := alice.PauseSession(ctx, s.ID); err != nil || (p.Resume == "snapshot") != snap {
		t.Fatalf("pause: %+v %v", p, err)
	}
	h.stop()
	saved := filepath.Join(dir, "snapshots", "paused", "gvisor")
	stray := filepath.Join(saved, "0123456789abcdef01234567")
	if err := os.MkdirAll(stray, 0o700); err != nil {
		t.Fatal(err)
	}
	h2 := newHarnessWith(t, testConfig(), dir, containerSessions(t, &img))
	if _, err := os.Stat(stray); !os.IsNotExist(err) {
		t.Errorf("start-up kept a saved sandbox no session owns: %v", err)
	}
	if kept, _ := os.ReadDir(saved); len(kept) != map[bool]int{true: 1, false: 0}[snap] {
		t.Errorf("saved sandboxes after start-up: %v", kept)
	}
	alice = h2.client(aliceToken)
	if got, err := alice.Session(ctx, s.ID); err != nil || got.State != client.SessionPaused {
		t.Fatalf("after the restart: %+v %v", got, err)
	}
	_, err = h2.client(bobToken).ResumeSession(ctx, s.ID)
	var ce *client.Error
	if !errAs(err, &ce) || ce.Status != 404 || ce.Message != "not-found (id): no session "+s.ID {
		t.Fatalf("bob resumes alice's session: %v", err)
	}
	if got, _ := alice.Session(ctx, s.ID); got.State != client.SessionPaused {
		t.Fatalf("bob's resume changed it: %+v", got)
	}
	r, err := alice.ResumeSession(ctx, s.ID)
	if err != nil || r.State != client.SessionRunning {
		t.Fatalf("resume: %+v %v", r, err)
	}
	res, err := alice.Exec(ctx, s.ID, &sandbox.Exec{Argv: []string{"sh", "-c", "cat notes/plan.md; stat -c %a notes/plan.md"}})
	if err != nil || string(res.Stdout) != "step 2\n600\n" {
		t.Fatalf("exec after the restart and resume: %+v %v", res, err)
	}
	ps, err := alice.Process(ctx, s.ID, "sleeper")
	want := map[bool]string{true: "running", false: "killed"}[snap]
	if err != nil || ps.State != want || snap && ps.Pid != bg.Pid {
		t.Fatalf("the background process after the restart: %+v %v, want %s", ps, err, want)
	}
}
