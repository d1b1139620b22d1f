package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
)

// TestSessionBackgroundThroughAPI: on container and gVisor, a background
// exec answers 202 with its pid, survives the next exec and its sweep
// (whose own leftover is gone: the positive control), is listed, and is
// gone once killed; one that writes and exits shows its exit code and
// exact output; bad input is a typed 400; another tenant gets the same
// 404 as for a missing session; deleting the session kills what is left,
// and nothing of the sandbox is left on the host.
func TestSessionBackgroundThroughAPI(t *testing.T) {
	var img string
	h := newHarnessWith(t, testConfig(), "", containerSessions(t, &img))
	for _, c := range []struct {
		trust   sandbox.TrustClass
		backend string
	}{{sandbox.Trusted, "container"}, {sandbox.Untrusted, "gvisor"}} {
		t.Run(c.backend, func(t *testing.T) { backgroundScenario(t, h, c.trust, c.backend) })
		t.Run(c.backend+"/stdin", func(t *testing.T) { stdinScenario(t, h, c.trust, c.backend) })
	}
}

func backgroundScenario(t *testing.T, h *harness, trust sandbox.TrustClass, backend string) {
	ctx := context.Background()
	alice := h.client(aliceToken)
	s, err := alice.CreateSession(ctx, &client.SessionRequest{Image: "busybox", Policy: sandbox.Policy{Trust: trust},
		Limits: sandbox.Limits{Wall: 20 * time.Second}, IdleTimeout: time.Minute})
	if err != nil || s.Backend != backend {
		t.Fatalf("create: %+v %v", s, err)
	}
	if err := alice.Upload(ctx, s.ID, "bg-marker", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	sbID := sessionSandbox(t, h.dir, "bg-marker")
	// sh's alive check of a pid from inside, by a later exec.
	alive := func(pid int) string {
		t.Helper()
		res, err := alice.Exec(ctx, s.ID, &sandbox.Exec{Argv: []string{"sh", "-c",
			fmt.Sprintf(`if [ -d /proc/%d ] && ! grep -q '^State:.*Z' /proc/%d/status; then echo alive; else echo gone; fi`, pid, pid)}})
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(res.Stdout))
	}

	resp, body := h.raw(http.MethodPost, "/v1/sessions/"+s.ID+"/exec", aliceToken, strings.NewReader(`{"id":"sleeper","argv":["sleep","600"],"background":true}`), nil)
	var sl client.Exec
	if resp.StatusCode != 202 || json.Unmarshal(body, &sl) != nil || sl.ID != "sleeper" || !sl.Background || sl.Pid <= 1 ||
		sl.State != client.ExecRunning || resp.Header.Get("Location") != "/v1/sessions/"+s.ID+"/exec/sleeper" {
		t.Fatalf("start the sleeper: %d %s", resp.StatusCode, body)
	}
	res, err := alice.Exec(ctx, s.ID, &sandbox.Exec{Argv: []string{"sh", "-c",
		`setsid sh -c 'echo $$ >left.pid; exec sleep 600' </dev/null >/dev/null 2>&1 & while [ ! -s left.pid ]; do :; done; cat left.pid`}})
	var left int
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("leftover: %+v %v", res, err)
	}
	if _, err := fmt.Sscan(string(res.Stdout), &left); err != nil {
		t.Fatalf("leftover pid %q", res.Stdout)
	}
	if got := alive(left); got != "gone" {
		t.Errorf("the foreground leftover %d: %s, want gone", left, got)
	}
	if got := alive(sl.Pid); got != "alive" {
		t.Errorf("the background sleeper %d: %s, want alive", sl.Pid, got)
	}
	ps, err := alice.Processes(ctx, s.ID)
	if err != nil || len(ps) != 1 || ps[0].ID != "sleeper" || ps[0].Pid != sl.Pid || ps[0].State != client.ExecRunning {
		t.Fatalf("processes: %+v %v", ps, err)
	}

	w, err := alice.StartBackground(ctx, s.ID, &sandbox.Exec{ID: "writer", Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}})
	if err != nil || w.State != client.ExecRunning {
		t.Fatalf("start the writer: %+v %v", w, err)
	}
	var done *client.Exec
	for deadline := time.Now().Add(10 * time.Second); done == nil; time.Sleep(5 * time.Millisecond) {
		p, err := alice.Process(ctx, s.ID, "writer")
		if err != nil {
			t.Fatal(err)
		}
		if p.State != client.ExecRunning {
			done = p
		} else if time.Now().After(deadline) {
			t.Fatalf("the writer still runs: %+v", p)
		}
	}
	if r := done.Result; done.State != client.ExecDone || r == nil || r.ExitCode != 3 || string(r.Stdout) != "out\n" || string(r.Stderr) != "err\n" || r.Class != sandbox.OK {
		t.Errorf("the writer ended: %+v %+v", done, done.Result)
	}
	if rec, err := alice.GetExec(ctx, s.ID, "writer"); err != nil || rec.State != client.ExecDone || string(rec.Result.Stdout) != "out\n" {
		t.Errorf("the writer's exec record: %+v %v", rec, err)
	}

	// Bad input: typed 400, nothing started.
	for _, c := range []struct{ body, field string }{
		{`{"argv":["cat"],"stdin":"eA==","background":true}`, "stdin"},
		{`{"argv":["true"],"wall":1000000000,"background":true}`, "wall"},
	} {
		resp, body := h.raw(http.MethodPost, "/v1/sessions/"+s.ID+"/exec", aliceToken, strings.NewReader(c.body), nil)
		if resp.StatusCode != 400 || !strings.Contains(string(body), `"field":"`+c.field+`"`) {
			t.Errorf("background %s: %d %s", c.field, resp.StatusCode, body)
		}
	}
	if ps, _ := alice.Processes(ctx, s.ID); len(ps) != 2 {
		t.Errorf("processes after the refusals: %+v", ps)
	}

	// Bob: the same 404 as for a session that does not exist.
	missing := strings.Repeat("0", 32)
	for _, rt := range []route{
		{http.MethodGet, "/v1/sessions/ID/processes", ""},
		{http.MethodGet, "/v1/sessions/ID/processes/sleeper", ""},
		{http.MethodDelete, "/v1/sessions/ID/processes/sleeper", ""},
		{http.MethodPost, "/v1/sessions/ID/exec", `{"argv":["sleep","600"],"background":true}`},
	} {
		r1, b1 := h.raw(rt.method, strings.ReplaceAll(rt.path, "ID", s.ID), bobToken, strings.NewReader(rt.body), nil)
		r2, b2 := h.raw(rt.method, strings.ReplaceAll(rt.path, "ID", missing), bobToken, strings.NewReader(rt.body), nil)
		if want := strings.ReplaceAll(string(b2), missing, s.ID); r1.StatusCode != 404 || r2.StatusCode != 404 || string(b1) != want {
			t.Errorf("bob %s %s: %d %s; missing: %d %s", rt.method, rt.path, r1.StatusCode, b1, r2.StatusCode, b2)
		}
	}
	if got := alive(sl.Pid); got != "alive" {
		t.Errorf("the sleeper after bob's kill: %s", got)
	}

	k, err := alice.KillProcess(ctx, s.ID, "sleeper")
	if err != nil || k.State != client.ExecKilled || k.Result == nil || k.Result.Class != sandbox.Killed || k.Result.ExitCode != 137 {
		t.Fatalf("kill: %+v %v", k, err)
	}
	if got := alive(sl.Pid); got != "gone" {
		t.Errorf("the sleeper %d after its kill: %s, want gone", sl.Pid, got)
	}
	resp, body = h.raw(http.MethodDelete, "/v1/sessions/"+s.ID+"/processes/sleeper", aliceToken, nil, nil)
	if resp.StatusCode != 404 || !strings.Contains(string(body), "no background process sleeper in session "+s.ID) {
		t.Errorf("a second kill: %d %s", resp.StatusCode, body)
	}
	if p, err := alice.Process(ctx, s.ID, "sleeper"); err != nil || p.State != client.ExecKilled {
		t.Errorf("the killed sleeper read: %+v %v", p, err)
	}

	last, err := alice.StartBackground(ctx, s.ID, &sandbox.Exec{ID: "last", Argv: []string{"sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.DeleteSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if rec, err := alice.GetExec(ctx, s.ID, last.ID); err != nil || rec.State != client.ExecKilled || rec.Result.Error != "its session ended" {
		t.Errorf("a background exec after its session's delete: %+v %v", rec, err)
	}
	resp, body = h.raw(http.MethodGet, "/v1/sessions/"+s.ID+"/processes", aliceToken, nil, nil)
	if resp.StatusCode != 409 {
		t.Errorf("processes of the ended session: %d %s", resp.StatusCode, body)
	}
	assertSandboxGone(t, h.dir, sbID)
}
