package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
)

// stdinScenario is TestSessionBackgroundThroughAPI's stdin part: a
// background exec started with open_stdin reads what POST .../stdin
// writes while it runs and ends at the write that closes it. On gVisor
// its open stdin survives a pause (by snapshot); on container the pause
// (by restart) ends it, and a write then is the missing process's 404. A
// bad close value is 400, another tenant gets the missing session's 404,
// and neither changes anything.
func stdinScenario(t *testing.T, h *harness, trust sandbox.TrustClass, backend string) {
	ctx := context.Background()
	alice := h.client(aliceToken)
	s, err := alice.CreateSession(ctx, &client.SessionRequest{Policy: sandbox.Policy{Trust: trust}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { alice.DeleteSession(ctx, s.ID) })
	bg, err := alice.StartBackground(ctx, s.ID, &sandbox.Exec{ID: "cat", Argv: []string{"cat"}, OpenStdin: true})
	if err != nil || !bg.OpenStdin || bg.State != "running" {
		t.Fatalf("start: %+v %v", bg, err)
	}
	if w, err := alice.WriteStdin(ctx, s.ID, "cat", []byte("one\n"), false); err != nil || w.Written != 4 || w.Closed {
		t.Fatalf("write: %+v %v", w, err)
	}
	resp, body := h.raw(http.MethodPost, "/v1/sessions/"+s.ID+"/processes/cat/stdin?close=maybe", aliceToken, strings.NewReader("x"), nil)
	if resp.StatusCode != 400 || !strings.Contains(string(body), `"field":"close"`) {
		t.Errorf("close=maybe: %d %s", resp.StatusCode, body)
	}
	_, err = h.client(bobToken).WriteStdin(ctx, s.ID, "cat", []byte("bob\n"), true)
	var ce *client.Error
	if !errAs(err, &ce) || ce.Status != 404 || ce.Message != "not-found (id): no session "+s.ID {
		t.Errorf("bob's write: %v", err)
	}
	if _, err := alice.PauseSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	w, err := alice.WriteStdin(ctx, s.ID, "cat", []byte("two\n"), true) // resumes the session
	if backend == "container" {
		if !errAs(err, &ce) || ce.Status != 404 {
			t.Fatalf("a write after a restart resume: %+v %v, want the missing process's 404", w, err)
		}
		return
	}
	if err != nil || w.Written != 4 || !w.Closed {
		t.Fatalf("write and close after the pause: %+v %v", w, err)
	}
	var p *client.Exec
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if p, err = alice.Process(ctx, s.ID, "cat"); err != nil || p.State != "running" {
			break
		}
	}
	if err != nil || p.State != "done" || p.Result == nil || string(p.Result.Stdout) != "one\ntwo\n" || p.Result.ExitCode != 0 {
		t.Fatalf("cat after its stdin closed: %+v %v", p, err)
	}
	if _, err := alice.WriteStdin(ctx, s.ID, "cat", []byte("x"), false); !errAs(err, &ce) || ce.Status != 409 {
		t.Errorf("a write after the close: %v, want 409", err)
	}
}
