package main

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/manager"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/server"
	"github.com/wovyr/wovyr/store"
)

// memBackend is a session-capable backend held in memory: the CLI's test
// is about its parsing, its calls and its output; the real sandboxes'
// sessions are tested in backend/oci and, through the API, in server.
type memBackend struct{}

func (memBackend) Name() string               { return "container" }
func (memBackend) Strength() sandbox.Strength { return sandbox.Container }
func (memBackend) Kinds() []sandbox.WorkloadKind {
	return []sandbox.WorkloadKind{sandbox.KindCommand, sandbox.KindSession}
}
func (memBackend) Probe(context.Context) sandbox.Capability {
	return sandbox.Capability{Available: true, Version: "mem-1", ConfigHash: "h"}
}
func (memBackend) Prepare(context.Context, sandbox.Template) (sandbox.Sandbox, error) {
	return &memBox{files: map[string][]byte{}}, nil
}

// memBox runs "cat PATH" and "echo ARGS..." over its files.
type memBox struct {
	mu    sync.Mutex
	files map[string][]byte
}

func (b *memBox) Run(context.Context, *sandbox.Invocation) (*sandbox.Result, error) {
	return nil, sandbox.Errorf(sandbox.BadInput, "", "sessions only")
}
func (b *memBox) Destroy(context.Context) error              { return nil }
func (b *memBox) Open(context.Context, *sandbox.Claim) error { return nil }

func (b *memBox) Exec(_ context.Context, e *sandbox.Exec) (*sandbox.Result, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch e.Argv[0] {
	case "cat":
		if d, ok := b.files[e.Argv[1]]; ok {
			return &sandbox.Result{Stdout: d}, nil
		}
		return &sandbox.Result{ExitCode: 1, Stderr: []byte("cat: " + e.Argv[1] + ": No such file or directory\n")}, nil
	case "echo":
		return &sandbox.Result{Stdout: []byte(strings.Join(e.Argv[1:], " ") + "\n" + string(e.Stdin))}, nil
	}
	return &sandbox.Result{ExitCode: 127}, nil
}

func (b *memBox) File(_ context.Context, op *sandbox.FileOp) (*sandbox.FileReply, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.files[op.Path]
	switch op.Op {
	case sandbox.FileWrite:
		b.files[op.Path] = op.Data
		return &sandbox.FileReply{}, nil
	case sandbox.FileList:
		out := &sandbox.FileReply{}
		for p, d := range b.files {
			out.Entries = append(out.Entries, sandbox.FileInfo{Path: p, Type: "file", Size: int64(len(d)), Mode: 0o644})
		}
		return out, nil
	case sandbox.FileRead:
		if ok {
			return &sandbox.FileReply{Data: d}, nil
		}
	case sandbox.FileRemove:
		if ok {
			delete(b.files, op.Path)
			return &sandbox.FileReply{}, nil
		}
	case sandbox.FileArchive: // a real tar of the files under op.Path, as the agent's
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, p := range slices.Sorted(maps.Keys(b.files)) {
			name, ok := strings.CutPrefix(p, op.Path+"/")
			if op.Path == "" {
				name, ok = p, true
			}
			if ok {
				tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b.files[p])), Typeflag: tar.TypeReg})
				tw.Write(b.files[p])
			}
		}
		tw.Close()
		return &sandbox.FileReply{Data: buf.Bytes()}, nil
	case sandbox.FileExtract:
		tr := tar.NewReader(bytes.NewReader(op.Data))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return &sandbox.FileReply{}, nil
			}
			if err != nil {
				return nil, sandbox.Errorf(sandbox.BadInput, "data", "not an archive: %v", err)
			}
			if h.Typeflag == tar.TypeReg {
				data, _ := io.ReadAll(tr)
				b.files[path.Join(op.Path, h.Name)] = data
			}
		}
	}
	return nil, sandbox.Errorf(sandbox.NotFound, "path", "openat %s: no such file or directory", op.Path)
}

// memDaemon serves the API in this process over memBackend.
func memDaemon(t *testing.T) string {
	t.Helper()
	return memDaemonWith(t, nil)
}

// memDaemonWith is memDaemon with the tenant "ops" (admin, token
// "ops-tok") beside alice, and tune, if set, adjusting the options.
func memDaemonWith(t *testing.T, tune func(*server.Options)) string {
	t.Helper()
	return daemonOver(t, nil, tune)
}

// daemonOver is memDaemonWith with the backends extra makes (in the
// daemon's directory) beside memBackend, each with a stub certification.
func daemonOver(t *testing.T, extra func(dir string) []sandbox.Backend, tune func(*server.Options)) string {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	backends := []sandbox.Backend{memBackend{}}
	if extra != nil {
		backends = append(backends, extra(dir)...)
	}
	for _, b := range backends {
		capa := b.Probe(context.Background())
		if !capa.Available {
			t.Fatalf("%s is unavailable: %s", b.Name(), capa.Reason)
		}
		if err := st.PutCert(cert.Record{Key: cert.Key{Backend: b.Name(), RuntimeVersion: capa.Version, Kernel: cert.Kernel(), ConfigHash: capa.ConfigHash},
			Passed: true, Outcomes: []cert.Outcome{{ID: 1, Applies: true, Pass: true, ControlFlagged: true}}}); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.DiscardHandler)
	mgr, err := manager.New(manager.Config{Backends: backends, Certs: st, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Config{Tenants: []config.Tenant{{Name: "alice", TokenSHA256: []string{config.HashToken("tok")}},
		{Name: "ops", Admin: true, TokenSHA256: []string{config.HashToken("ops-tok")}}},
		Pools: []config.Pool{{MaxLive: 4}}}
	opts := server.Options{Config: cfg, Manager: mgr, Store: st, Logger: log, SessionDir: filepath.Join(dir, "sessions")}
	if tune != nil {
		tune(&opts)
	}
	srv, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
		st.Close()
	})
	return "http://" + ln.Addr().String()
}

// sessionCLI returns what runs `wovyr session ARGS` as alice (token
// "tok") against the daemon at url, with its stdout, stderr and exit code.
func sessionCLI(t *testing.T, url string) func(args ...string) (string, string, int) {
	return func(args ...string) (string, string, int) {
		t.Helper()
		var out, errb bytes.Buffer
		sc := &sessionCtx{g: &globals{stateDir: t.TempDir()}, stdout: &out, stderr: &errb}
		if len(args) > 0 {
			args = append([]string{args[0], "--remote", url, "--token", "tok"}, args[1:]...)
		}
		code := sc.dispatch(context.Background(), args)
		return out.String(), errb.String(), code
	}
}

// TestSessionCLI: create, cp in, exec, cp out, ls, rm of a file and of the
// session, as a user types them, with their output and exit codes.
func TestSessionCLI(t *testing.T) {
	url := memDaemon(t)
	local := filepath.Join(t.TempDir(), "main.sh")
	if err := os.WriteFile(local, []byte("echo hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tree, back := t.TempDir(), filepath.Join(t.TempDir(), "back")
	os.MkdirAll(filepath.Join(tree, "src"), 0o755)
	os.WriteFile(filepath.Join(tree, "src", "lib.py"), []byte("x = 1\n"), 0o644)
	os.WriteFile(filepath.Join(tree, "README"), []byte("read me\n"), 0o644)
	run := sessionCLI(t, url)
	id, errs, code := run("create", "--trust", "trusted", "--idle-timeout", "5m")
	id = strings.TrimSpace(id)
	if code != 0 || len(id) != 32 || errs != "" {
		t.Fatalf("create: %q %q %d", id, errs, code)
	}
	steps := []struct {
		args           []string
		stdout, stderr string
		code           int
	}{
		{[]string{"cp", local, id + ":main.sh"}, "", "", 0},
		{[]string{"exec", id, "--", "cat", "main.sh"}, "echo hi\n", "", 0},
		{[]string{"exec", id, "--", "cat", "nope"}, "", "cat: nope: No such file or directory\n", 1},
		{[]string{"cp", id + ":main.sh", "-"}, "echo hi\n", "", 0},
		{[]string{"cp", "-r", tree, id + ":proj"}, "", "", 0},
		{[]string{"exec", id, "--", "cat", "proj/src/lib.py"}, "x = 1\n", "", 0},
		{[]string{"cp", "-r", id + ":proj", back}, "", "", 0},
		{[]string{"cp", "-r", id + ":proj", id + ":other"}, "", "usage", exitUsage},
		{[]string{"cp", "-r", filepath.Join(tree, "nope"), id + ":x"}, "", "wovyr: bad-input: cp -r: open " + filepath.Join(tree, "nope") + ": no such file or directory\n", exitBadInput},
		{[]string{"rm", id + ":proj/src/lib.py"}, "", "", 0},
		{[]string{"rm", id + ":proj/README"}, "", "", 0},
		{[]string{"pause", id}, id + " paused (resume: restart, 2048 bytes kept)\n", "", 0},
		{[]string{"exec", id, "--", "cat", "main.sh"}, "echo hi\n", "", 0}, // resumed by it
		{[]string{"pause", id}, id + " paused (resume: restart, 2048 bytes kept)\n", "", 0},
		{[]string{"resume", id}, id + " running\n", "", 0},
		{[]string{"ls", id}, "file  0644  8  " + time.Time{}.Local().Format(time.DateTime) + "  main.sh\n", "", 0},
		{[]string{"cp", id + ":nope", "-"}, "", "wovyr: not-found (path): openat nope: no such file or directory\n", exitBadInput},
		{[]string{"cp", local, id + ":../x"}, "", "wovyr: bad-input (path): path leaves the workspace\n", exitBadInput},
		{[]string{"rm", id + ":main.sh"}, "", "", 0},
		{[]string{"exec", id, "--", "cat", "main.sh"}, "", "cat: main.sh: No such file or directory\n", 1},
		{[]string{"rm", id}, "", "", 0},
		{[]string{"exec", id, "--", "echo"}, "", "wovyr: conflict (id): session " + id + " has ended (ended: deleted)\n", exitBadInput},
		{[]string{"rm", "0123456789abcdef0123456789abcdef"}, "", "wovyr: not-found (id): no session 0123456789abcdef0123456789abcdef\n", exitBadInput},
		{[]string{"create", "--max-lifetime", "48h"}, "", "wovyr: bad-input (max_lifetime): must be between 1s and 24h0m0s\n", exitBadInput},
	}
	for _, s := range steps {
		out, errs, code := run(s.args...)
		if s.args[0] == "ls" {
			out = strings.Join(strings.Fields(out), " ") + "\n" // tabwriter's padding
			s.stdout = strings.Join(strings.Fields(s.stdout), " ") + "\n"
		}
		if s.stderr == "usage" && strings.Contains(errs, "usage: wovyr session cp") {
			errs = "usage"
		}
		if out != s.stdout || errs != s.stderr || code != s.code {
			t.Errorf("wovyr session %v: stdout %q stderr %q exit %d, want %q %q %d", s.args, out, errs, code, s.stdout, s.stderr, s.code)
		}
	}
	for name, want := range map[string]string{"src/lib.py": "x = 1\n", "README": "read me\n"} {
		if got, err := os.ReadFile(filepath.Join(back, name)); err != nil || string(got) != want {
			t.Errorf("cp -r back: %s is %q %v, want %q", name, got, err, want)
		}
	}
	if out, _, code := run("ls"); code != 0 || !strings.Contains(out, id+"  container  ended") {
		t.Errorf("ls of sessions: %d %q", code, out)
	}
	_, errs, code = run()
	if code != exitUsage || !strings.Contains(errs, "usage: wovyr session COMMAND") {
		t.Errorf("no subcommand: %d %q", code, errs)
	}
	var out bytes.Buffer
	state := t.TempDir()
	sc := &sessionCtx{g: &globals{stateDir: state}, stdout: io.Discard, stderr: &out}
	want := "wovyr: bad-input (remote): sessions live in a daemon, and none serves the state dir " + state + ": start wovyr serve, or give --remote URL (or $WOVYR_REMOTE)\n"
	if code := sc.dispatch(context.Background(), []string{"ls"}); code != exitBadInput || out.String() != want {
		t.Errorf("without --remote: %d %q", code, out.String())
	}
	// A daemon over the state dir: its address file, and the store's lock
	// held (here by the test, as a daemon holds it).
	os.WriteFile(filepath.Join(state, localAddrFile), []byte(strings.TrimPrefix(url, "http://")+"\n"), 0o644)
	out.Reset()
	if code := sc.dispatch(context.Background(), []string{"ls", "--token", "tok"}); code != exitBadInput || out.String() != want {
		t.Errorf("an address file no daemon holds: %d %q", code, out.String())
	}
	st, err := store.Open(state, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var listed bytes.Buffer
	sc = &sessionCtx{g: &globals{stateDir: state}, stdout: &listed, stderr: &out}
	if code := sc.dispatch(context.Background(), []string{"ls", "--token", "tok"}); code != 0 || !strings.Contains(listed.String(), id) {
		t.Errorf("through the state dir's daemon: %d %q %q", code, listed.String(), out.String())
	}
}
