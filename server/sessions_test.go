package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/backend/oci"
	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/image"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// ociTemplates is the OCI tests' template cache, read only here: a
// harness's state dir links its templates from it.
const ociTemplates = "/var/cache/wovyr-test/oci/images"

// containerSessions returns the harness's extra backends: pooled container
// and gVisor backends in the harness's state dir, with the agent built
// into it, and the image the agent-style scenario uses — python when the cache
// has it (main.py), else busybox (main.sh). Its certification is a stub for
// each exact key: the escape battery certifies the real configurations in
// backend/oci; these tests are about the session path through the API.
func containerSessions(t testing.TB, img *string) func(dir string, st *store.Store) []sandbox.Backend {
	return func(dir string, st *store.Store) []sandbox.Backend {
		t.Helper()
		*img = "busybox"
		if image.Exists(ociTemplates, "python") {
			*img = "python"
		}
		if !image.Exists(ociTemplates, "busybox") {
			t.Fatalf("no busybox template in %s (the backend/oci tests build it)", ociTemplates)
		}
		if err := os.MkdirAll(filepath.Join(dir, "images"), 0o711); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"busybox", *img} {
			link := filepath.Join(dir, "images", name)
			if _, err := os.Lstat(link); err != nil {
				if err := os.Symlink(filepath.Join(ociTemplates, name), link); err != nil {
					t.Fatal(err)
				}
			}
		}
		guest := filepath.Join(dir, "wovyr-guest")
		build := exec.Command("go", "build", "-o", guest, "github.com/wovyr/wovyr/cmd/wovyr-guest")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build wovyr-guest: %v\n%s", err, out)
		}
		cfg := oci.Config{StateDir: dir, Agent: guest, Pooled: true, Logger: slog.New(slog.DiscardHandler)}
		var out []sandbox.Backend
		for _, mk := range []func(oci.Config) (*oci.Backend, error){oci.NewContainer, oci.NewGVisor} {
			b, err := mk(cfg)
			if err != nil {
				t.Fatal(err)
			}
			capa := b.Probe(context.Background())
			if !capa.Available {
				t.Fatalf("%s backend unavailable: %s", b.Name(), capa.Reason)
			}
			rec := cert.Record{Key: cert.Key{Backend: b.Name(), RuntimeVersion: capa.Version, Kernel: cert.Kernel(), ConfigHash: capa.ConfigHash},
				Passed: true, Outcomes: []cert.Outcome{{ID: 1, Name: "stub for the session API test", Applies: true, Pass: true, ControlFlagged: true}}, At: time.Now()}
			if err := st.PutCert(rec); err != nil {
				t.Fatal(err)
			}
			out = append(out, b)
		}
		return out
	}
}

// scenario is the agent-style program: it writes a file the next exec
// reads, and says hello to its argument.
func scenario(img string) (file, prog string, data []byte) {
	if img == "python" {
		return "main.py", "python3", []byte("import sys\nopen('out.txt', 'w').write('hello ' + sys.argv[1] + '\\n')\nprint(open('out.txt').read(), end='')\n")
	}
	return "main.sh", "sh", []byte("echo hello $1 > out.txt\ncat out.txt\n")
}

// TestSessionEndToEnd is the agent-style scenario through the HTTP API on
// the container backend: create a session, upload the program, run it,
// run again and find its file, read the file back; a second tenant gets
// the same 404 as for a missing id on every route; delete, then every
// route is 409 and nothing of the sandbox is left on the host.
func TestSessionEndToEnd(t *testing.T) {
	var img string
	h := newHarnessWith(t, testConfig(), "", containerSessions(t, &img))
	t.Logf("image %s", img)
	// Trusted's floor is native, which cannot hold a session: Select
	// takes the weakest backend at or above it that can. Untrusted's is
	// gVisor.
	for _, c := range []struct {
		trust   sandbox.TrustClass
		backend string
	}{{sandbox.Trusted, "container"}, {sandbox.Untrusted, "gvisor"}} {
		t.Run(c.backend, func(t *testing.T) { agentScenario(t, h, img, c.trust, c.backend) })
	}
	// Hostile's floor is microVM, which this harness lacks: 409, and
	// nothing recorded.
	_, err := h.client(aliceToken).CreateSession(context.Background(), &client.SessionRequest{Policy: sandbox.Policy{Trust: sandbox.Hostile}})
	var ce *client.Error
	if !errAs(err, &ce) || ce.Status != 409 || ce.Code != sandbox.FloorUnmet || ce.Message != "floor-unmet: no usable backend at or above microvm for a session workload: no backend is registered at that strength" {
		t.Fatalf("hostile session: %v", err)
	}
	if l, _ := h.client(aliceToken).Sessions(context.Background()); len(l) != 2 {
		t.Fatalf("%d sessions recorded, want the scenario's 2", len(l))
	}
}

// agentScenario is TestSessionEndToEnd's scenario on one backend.
func agentScenario(t *testing.T, h *harness, img string, trust sandbox.TrustClass, backend string) {
	ctx := context.Background()
	alice, bob := h.client(aliceToken), h.client(bobToken)
	s, err := alice.CreateSession(ctx, &client.SessionRequest{Image: img, Policy: sandbox.Policy{Trust: trust},
		Limits: sandbox.Limits{Wall: 20 * time.Second}, IdleTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if s.State != client.SessionRunning || s.Backend != backend || s.Tenant != "alice" || len(s.ID) != 32 || s.IdleTimeout != time.Minute {
		t.Fatalf("created %+v", s)
	}
	name, prog, data := scenario(img)
	if err := alice.Upload(ctx, s.ID, name, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sbID := sessionSandbox(t, h.dir, name)
	res, err := alice.Exec(ctx, s.ID, &sandbox.Exec{Argv: []string{prog, name, "agent"}})
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "hello agent\n" || res.Backend != backend {
		t.Fatalf("first exec: %+v %v", res, err)
	}
	res, err = alice.Exec(ctx, s.ID, &sandbox.Exec{Argv: []string{"cat", "out.txt"}})
	if err != nil || string(res.Stdout) != "hello agent\n" {
		t.Fatalf("second exec: %+v %v", res, err)
	}
	if got, err := alice.Download(ctx, s.ID, "out.txt"); err != nil || string(got) != "hello agent\n" {
		t.Fatalf("download: %q %v", got, err)
	}
	ents, err := alice.ListFiles(ctx, s.ID, "")
	var names []string
	for _, e := range ents {
		names = append(names, e.Path)
	}
	if err != nil || !slices.Equal(names, []string{name, "out.txt"}) {
		t.Fatalf("list: %v %v", names, err)
	}
	if fi, err := alice.Stat(ctx, s.ID, name); err != nil || fi.Size != int64(len(data)) || fi.Type != "file" || fi.Mode != 0o644 {
		t.Fatalf("stat: %+v %v", fi, err)
	}
	if got, err := alice.Session(ctx, s.ID); err != nil || got.Execs != 2 || got.LastActive.IsZero() {
		t.Fatalf("get: %+v %v", got, err)
	}

	// Bob: every route answers exactly as for an id that does not exist.
	missing := strings.Repeat("0", 32)
	for _, route := range sessionRoutes() {
		r1, b1 := h.raw(route.method, strings.ReplaceAll(route.path, "ID", s.ID), bobToken, strings.NewReader(route.body), nil)
		r2, b2 := h.raw(route.method, strings.ReplaceAll(route.path, "ID", missing), bobToken, strings.NewReader(route.body), nil)
		want := strings.ReplaceAll(string(b2), missing, s.ID)
		if r1.StatusCode != 404 || r2.StatusCode != 404 || string(b1) != want {
			t.Errorf("bob %s %s: %d %s; missing: %d %s", route.method, route.path, r1.StatusCode, b1, r2.StatusCode, b2)
		}
	}
	if l, err := bob.Sessions(ctx); err != nil || len(l) != 0 {
		t.Fatalf("bob lists %v %v", l, err)
	}

	// Bad requests: typed 4xx, and the session goes on unchanged.
	bad := []struct {
		err    error
		status int
		field  string
	}{
		{alice.Upload(ctx, s.ID, "../escape", []byte("x"), 0), 400, "path"},
		{alice.Upload(ctx, s.ID, "big", make([]byte, 65<<10), 0), 413, ""},
		{second(alice.Download(ctx, s.ID, "nope")), 404, "path"},
		{second(alice.Exec(ctx, s.ID, &sandbox.Exec{Argv: []string{"true"}, Wall: time.Hour})), 400, "wall"},
		{second(alice.CreateSession(ctx, &client.SessionRequest{Policy: sandbox.Policy{Trust: sandbox.Trusted}, IdleTimeout: 2 * time.Hour, MaxLifetime: time.Hour})), 400, "idle_timeout"},
		{second(alice.CreateSession(ctx, &client.SessionRequest{Policy: sandbox.Policy{Trust: sandbox.Trusted}, Image: "nope"})), 400, "workload.image"},
	}
	for i, c := range bad {
		var ce *client.Error
		if !errAs(c.err, &ce) || ce.Status != c.status || ce.Field != c.field {
			t.Errorf("bad request %d: %v, want %d on %q", i, c.err, c.status, c.field)
		}
	}
	resp, body := h.raw(http.MethodPost, "/v1/sessions", aliceToken, strings.NewReader(`{"policy":{"trust":"trusted"},"idle_timeout":-1}`), nil)
	if resp.StatusCode != 400 || !strings.Contains(string(body), `"field":"idle_timeout"`) {
		t.Errorf("negative idle_timeout: %d %s", resp.StatusCode, body)
	}
	if v, _ := alice.Session(ctx, s.ID); v.State != client.SessionRunning || v.Execs != 2 {
		t.Fatalf("the session after the bad requests: %+v", v)
	}
	if ents, _ := alice.ListFiles(ctx, s.ID, ""); len(ents) != 2 {
		t.Fatalf("workspace after the bad requests: %+v", ents)
	}

	sbID = archiveAndPause(t, h, s.ID, sbID, name, data)

	end, err := alice.DeleteSession(ctx, s.ID)
	if err != nil || end.State != client.SessionEnded || end.EndReason != "deleted" || !end.LastActive.IsZero() {
		t.Fatalf("delete: %+v %v", end, err)
	}
	for _, route := range sessionRoutes() {
		r, b := h.raw(route.method, strings.ReplaceAll(route.path, "ID", s.ID), aliceToken, strings.NewReader(route.body), nil)
		if r.StatusCode != 409 || !strings.Contains(string(b), "session "+s.ID+" has ended (ended: deleted)") {
			t.Errorf("alice %s %s after delete: %d %s", route.method, route.path, r.StatusCode, b)
		}
	}
	assertSandboxGone(t, h.dir, sbID)
}

type route struct{ method, path, body string }

// sessionRoutes are the routes of one session (ID stands for its id).
func sessionRoutes() []route {
	return []route{
		{http.MethodDelete, "/v1/sessions/ID", ""},
		{http.MethodPost, "/v1/sessions/ID/exec", `{"argv":["true"]}`},
		{http.MethodGet, "/v1/sessions/ID/files", ""},
		{http.MethodGet, "/v1/sessions/ID/files/stat?path=out.txt", ""},
		{http.MethodGet, "/v1/sessions/ID/files/content?path=out.txt", ""},
		{http.MethodPut, "/v1/sessions/ID/files/content?path=x", "data"},
		{http.MethodDelete, "/v1/sessions/ID/files/content?path=out.txt", ""},
		{http.MethodGet, "/v1/sessions/ID/files/archive", ""},
		{http.MethodPut, "/v1/sessions/ID/files/archive?path=x", ""},
		{http.MethodPost, "/v1/sessions/ID/pause", ""},
		{http.MethodPost, "/v1/sessions/ID/resume", ""},
		{http.MethodPost, "/v1/sessions/ID/processes/e1/stdin", "x"},
	}
}

func second[T any](_ T, err error) error { return err }

// sessionSandbox finds the id of the container sandbox whose workspace
// holds file (the host sees it through the sandbox's root overlay).
func sessionSandbox(t *testing.T, dir, file string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "run", "oci", "sb", "*", "rootfs", "workspace", file))
	if len(m) != 1 {
		t.Fatalf("want one sandbox with %s in its workspace, found %v", file, m)
	}
	return filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(m[0]))))
}

// assertSandboxGone checks the host's kernel state for sandbox id: no
// directory, no mount, no cgroup in any hierarchy and no process in one.
func assertSandboxGone(t *testing.T, dir, id string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "run", "oci", "sb", id)); err == nil {
		t.Errorf("sandbox directory %s left", id)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(mi, []byte(id)) {
		t.Errorf("a mount of %s is left", id)
	}
	if cg, _ := filepath.Glob("/sys/fs/cgroup/*/wovyr/_pool/" + id); len(cg) > 0 {
		t.Errorf("cgroups of %s left: %v", id, cg)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(id)) {
			t.Errorf("process %s is in a cgroup of %s", filepath.Base(filepath.Dir(p)), id)
		}
	}
}

// TestSessionQuotaAndRestart: max_sessions bounds a tenant's live sessions
// (429, nothing recorded), and a daemon that stops with a live session
// records it interrupted; a restart finds it so and serves it as ended.
func TestSessionQuotaAndRestart(t *testing.T) {
	var img string
	cfg := testConfig()
	cfg.Tenants[0].MaxSessions = 1
	dir := stateDir(t)
	h := newHarnessWith(t, cfg, dir, containerSessions(t, &img))
	ctx := context.Background()
	alice := h.client(aliceToken)
	req := &client.SessionRequest{Policy: sandbox.Policy{Trust: sandbox.Trusted}}
	s, err := alice.CreateSession(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	_, err = alice.CreateSession(ctx, req)
	var ce *client.Error
	if !errAs(err, &ce) || ce.Status != 429 || ce.Message != "rate-limited: tenant alice has 1 live sessions, its quota" {
		t.Fatalf("second session: %v", err)
	}
	if l, _ := alice.Sessions(ctx); len(l) != 1 {
		t.Fatalf("%d sessions recorded", len(l))
	}
	if err := alice.Upload(ctx, s.ID, "marker", []byte("m"), 0); err != nil {
		t.Fatal(err)
	}
	sbID := sessionSandbox(t, dir, "marker")
	h.stop()
	assertSandboxGone(t, dir, sbID)
	// A crash leaves a record running that no daemon holds.
	st, err := store.Open(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	crashed := store.Session{ID: strings.Repeat("c", 32), Tenant: "alice", Backend: "container", State: store.SessionRunning, Created: now,
		Claim:       sandbox.Claim{ID: strings.Repeat("c", 32), Tenant: "alice", Policy: sandbox.Policy{Trust: sandbox.Trusted}},
		Transitions: []store.SessionTransition{{State: store.SessionCreating, At: now}, {State: store.SessionRunning, At: now}}}
	if err := st.BeginSession(crashed); err != nil {
		t.Fatal(err)
	}
	st.Close()
	h2 := newHarnessWith(t, cfg, dir, containerSessions(t, &img))
	for id, reason := range map[string]string{s.ID: "daemon-shutdown", crashed.ID: "daemon-restart"} {
		got, err := h2.client(aliceToken).Session(ctx, id)
		if err != nil || got.State != client.SessionInterrupted || got.EndReason != reason {
			t.Fatalf("%s after the restart: %+v %v", id, got, err)
		}
		b, _ := json.Marshal(got.Transitions[len(got.Transitions)-1])
		if !strings.Contains(string(b), `"state":"interrupted","at":`) || !strings.Contains(string(b), `"reason":"`+reason+`"`) {
			t.Fatalf("last transition %s", b)
		}
	}
	// The quota counts live sessions only.
	if _, err := h2.client(aliceToken).CreateSession(ctx, req); err != nil {
		t.Fatal(err)
	}
}

// TestSessionIdleTimeoutPausesIt: the daemon pauses a session nobody
// touched for its idle timeout — its sandbox leaves nothing on the host —
// and the next request resumes it with its files.
func TestSessionIdleTimeoutPausesIt(t *testing.T) {
	var img string
	h := newHarnessWith(t, testConfig(), "", containerSessions(t, &img))
	ctx := context.Background()
	alice := h.client(aliceToken)
	s, err := alice.CreateSession(ctx, &client.SessionRequest{Policy: sandbox.Policy{Trust: sandbox.Trusted}, IdleTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := alice.Upload(ctx, s.ID, "marker", []byte("m"), 0); err != nil {
		t.Fatal(err)
	}
	sbID := sessionSandbox(t, h.dir, "marker")
	// Not a timing assertion: the pause is awaited, bounded so that a
	// daemon that never expires sessions fails instead of hanging.
	var got *client.Session
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got, err = alice.Session(ctx, s.ID); err != nil || got.State != client.SessionRunning {
			break
		}
	}
	if err != nil || got.State != client.SessionPaused || got.Resume != "restart" || got.PausedBytes == 0 {
		t.Fatalf("after its idle timeout: %+v %v", got, err)
	}
	if tr := got.Transitions[len(got.Transitions)-1]; tr.State != client.SessionPaused || tr.Reason != "idle-timeout" {
		t.Fatalf("last transition %+v", tr)
	}
	assertSandboxGone(t, h.dir, sbID)
	res, err := alice.Exec(ctx, s.ID, &sandbox.Exec{Argv: []string{"cat", "marker"}})
	if err != nil || string(res.Stdout) != "m" {
		t.Fatalf("exec after the idle pause: %+v %v", res, err)
	}
	if got, _ := alice.Session(ctx, s.ID); got.State != client.SessionRunning || got.PausedBytes != 0 {
		t.Fatalf("resumed: %+v", got)
	}
	if ents, _ := os.ReadDir(filepath.Join(h.dir, "sessions")); len(ents) != 0 {
		t.Fatalf("a resumed session's workspace is left: %v", ents)
	}
}
