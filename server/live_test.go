package server_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// gated is a command that prints, then waits until a file "go" appears in
// its workspace, then prints again: output that arrives before the test
// writes the file can only have been sent while the command ran.
var gated = []string{"sh", "-c", `echo first; echo warn >&2; while [ ! -e go ]; do sleep 0.01; done; echo second`}

// openGates writes "go" into the workspace of every container sandbox of
// the harness, from the host side of its root (the container tier's
// overlay shows it inside).
func openGates(t *testing.T, dir string) {
	t.Helper()
	ws, _ := filepath.Glob(filepath.Join(dir, "run", "oci", "sb", "*", "rootfs", "workspace"))
	for _, w := range ws {
		if err := os.WriteFile(filepath.Join(w, "go"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// collect reads a stream's events; at the first stdout event it calls
// first (once).
func collect(t *testing.T, read func(func(client.Event) error) error, first func()) []client.Event {
	t.Helper()
	var evs []client.Event
	err := read(func(ev client.Event) error {
		evs = append(evs, ev)
		if ev.Type == client.EventStdout && first != nil {
			first()
			first = nil
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestExecEventsLive: an exec started with wait=0 streams its output while
// it runs (the gate opens only on the first chunk), ends with its exit
// event, and a late stream and a resumed one see the same events under
// the same numbers; another tenant gets the 404 of a missing session.
func TestExecEventsLive(t *testing.T) {
	var img string
	h := newHarnessWith(t, testConfig(), "", containerSessions(t, &img))
	ctx := context.Background()
	alice := h.client(aliceToken)
	s, err := alice.CreateSession(ctx, &client.SessionRequest{Policy: sandbox.Policy{Trust: sandbox.Trusted}, Limits: sandbox.Limits{Wall: 20 * time.Second}})
	if err != nil || s.Backend != "container" {
		t.Fatalf("create: %+v %v", s, err)
	}
	ex, err := alice.StartExec(ctx, s.ID, &sandbox.Exec{ID: "e1", Argv: gated})
	if err != nil || ex.ID != "e1" || ex.State != client.ExecRunning || ex.Result != nil {
		t.Fatalf("start: %+v %v", ex, err)
	}
	evs := collect(t, func(fn func(client.Event) error) error { return alice.ExecEvents(ctx, s.ID, "e1", 0, fn) }, func() {
		if got, err := alice.GetExec(ctx, s.ID, "e1"); err != nil || got.State != client.ExecRunning {
			t.Errorf("exec while its first chunk streamed: %+v %v", got, err)
		}
		openGates(t, h.dir)
	})
	last := evs[len(evs)-1]
	if last.Type != client.EventExit || last.Exec == nil || last.Exec.State != client.ExecDone || last.Exec.Result.ExitCode != 0 ||
		string(last.Exec.Result.Stdout) != "first\nsecond\n" || string(last.Exec.Result.Stderr) != "warn\n" {
		t.Fatalf("exit event %+v", last)
	}
	var out, errs string
	for i, ev := range evs {
		if ev.Seq != i+1 {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
		switch ev.Type {
		case client.EventStdout:
			out += string(ev.Data)
		case client.EventStderr:
			errs += string(ev.Data)
		}
	}
	if out != "first\nsecond\n" || errs != "warn\n" {
		t.Fatalf("streamed %q %q", out, errs)
	}
	// Late: the same sequence, replayed from the record. Resumed after
	// the first event: the rest of it.
	late := collect(t, func(fn func(client.Event) error) error { return alice.ExecEvents(ctx, s.ID, "e1", 0, fn) }, nil)
	resumed := collect(t, func(fn func(client.Event) error) error { return alice.ExecEvents(ctx, s.ID, "e1", 1, fn) }, nil)
	if !reflect.DeepEqual(strip(late), strip(evs)) || !reflect.DeepEqual(strip(resumed), strip(evs[1:])) {
		t.Fatalf("late %+v\nresumed %+v\nlive %+v", late, resumed, evs)
	}
	// The synchronous exec path is unchanged, and a reused id is 409.
	if res, err := alice.Exec(ctx, s.ID, &sandbox.Exec{Argv: []string{"echo", "sync"}}); err != nil || string(res.Stdout) != "sync\n" {
		t.Fatalf("sync exec: %+v %v", res, err)
	}
	var ce *client.Error
	if _, err := alice.StartExec(ctx, s.ID, &sandbox.Exec{ID: "e1", Argv: []string{"true"}}); !errors.As(err, &ce) || ce.Status != 409 {
		t.Fatalf("reused exec id: %v", err)
	}
	// Bad input: a wait other than 0, a bad Last-Event-ID.
	r, b := h.raw(http.MethodPost, "/v1/sessions/"+s.ID+"/exec?wait=5s", aliceToken, strings.NewReader(`{"argv":["true"]}`), nil)
	if r.StatusCode != 400 || !strings.Contains(string(b), `"field":"wait"`) {
		t.Fatalf("wait=5s: %d %s", r.StatusCode, b)
	}
	r, b = h.raw(http.MethodGet, "/v1/sessions/"+s.ID+"/exec/e1/events", aliceToken, nil, map[string]string{"Last-Event-ID": "x"})
	if r.StatusCode != 400 || !strings.Contains(string(b), `"field":"Last-Event-ID"`) {
		t.Fatalf("bad Last-Event-ID: %d %s", r.StatusCode, b)
	}
	// Bob cannot attach to alice's exec: byte for byte a missing session.
	missing := strings.Repeat("0", 32)
	for _, p := range []string{"/v1/sessions/ID/exec/e1", "/v1/sessions/ID/exec/e1/events"} {
		r1, b1 := h.raw(http.MethodGet, strings.ReplaceAll(p, "ID", s.ID), bobToken, nil, nil)
		r2, b2 := h.raw(http.MethodGet, strings.ReplaceAll(p, "ID", missing), bobToken, nil, nil)
		if r1.StatusCode != 404 || r2.StatusCode != 404 || string(b1) != strings.ReplaceAll(string(b2), missing, s.ID) {
			t.Errorf("bob GET %s: %d %s; missing: %d %s", p, r1.StatusCode, b1, r2.StatusCode, b2)
		}
	}
	if r, b := h.raw(http.MethodGet, "/v1/sessions/"+s.ID+"/exec/nope/events", aliceToken, nil, nil); r.StatusCode != 404 ||
		!strings.Contains(string(b), "no exec nope in session "+s.ID) {
		t.Fatalf("unknown exec: %d %s", r.StatusCode, b)
	}
	if _, err := alice.DeleteSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	// Ended sessions keep their execs' records.
	if got, err := alice.GetExec(ctx, s.ID, "e1"); err != nil || got.State != client.ExecDone {
		t.Fatalf("exec after delete: %+v %v", got, err)
	}
}

// TestInvocationEventsLive: a one-shot invocation's stdout arrives while
// it runs (container tier), and the stream replays the same afterwards.
func TestInvocationEventsLive(t *testing.T) {
	var img string
	h := newHarnessWith(t, testConfig(), "", containerSessions(t, &img))
	ctx := context.Background()
	alice := h.client(aliceToken)
	inv, err := alice.Submit(ctx, &sandbox.Invocation{Workload: sandbox.Workload{Kind: sandbox.KindCommand, Image: "busybox", Argv: gated},
		Limits: sandbox.Limits{Wall: 20 * time.Second}, Policy: sandbox.Policy{Trust: sandbox.Trusted, Preference: sandbox.Container}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	evs := collect(t, func(fn func(client.Event) error) error { return alice.Events(ctx, inv.ID, fn) }, func() { openGates(t, h.dir) })
	last := evs[len(evs)-1]
	if last.Type != client.EventResult || last.Invocation.State != client.StateDone || string(last.Invocation.Result.Stdout) != "first\nsecond\n" {
		t.Fatalf("result event %+v", last)
	}
	late := collect(t, func(fn func(client.Event) error) error { return alice.Events(ctx, inv.ID, fn) }, nil)
	if !reflect.DeepEqual(strip(late), strip(evs)) {
		t.Fatalf("late %+v\nlive %+v", late, evs)
	}
}

// strip drops what a replay may render differently but means the same
// (nothing today): events compare by type, seq, state and data.
func strip(evs []client.Event) []client.Event {
	out := make([]client.Event, len(evs))
	for i, ev := range evs {
		out[i] = client.Event{Seq: ev.Seq, Type: ev.Type, State: ev.State, Data: ev.Data}
	}
	return out
}

// TestFollowLive is the holder's side of an event stream read through
// another node (Server.Follow): while the invocation runs, its chunks past
// those the reader has, each as soon as it exists; with nothing new, it
// waits out its bound and answers the same state; another tenant's id is
// not found; and the chunks it sent live are a prefix of the record's.
func TestFollowLive(t *testing.T) {
	var img string
	h := newHarnessWith(t, testConfig(), "", containerSessions(t, &img))
	ctx := context.Background()
	inv, err := h.client(aliceToken).Submit(ctx, &sandbox.Invocation{Workload: sandbox.Workload{Kind: sandbox.KindCommand, Image: "busybox", Argv: gated},
		Limits: sandbox.Limits{Wall: 20 * time.Second}, Policy: sandbox.Policy{Trust: sandbox.Trusted, Preference: sandbox.Container}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var state store.State
	var live []sandbox.Chunk
	text := func() string {
		var b strings.Builder
		for _, c := range live {
			b.WriteString(string(c.Stream) + ":" + string(c.Data))
		}
		return b.String()
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(text(), "stdout:first\n") || !strings.Contains(text(), "stderr:warn\n") {
		if time.Now().After(deadline) {
			t.Fatalf("no live output: state %s, chunks %q", state, text())
		}
		rec, more, err := h.srv.Follow(ctx, "alice", inv.ID, state, len(live), 5*time.Second)
		if err != nil || rec.State.Terminal() {
			t.Fatalf("follow while gated: %+v %v", rec, err)
		}
		state, live = rec.State, append(live, more...)
	}
	if state != store.Running {
		t.Fatalf("chunks %q in state %s", text(), state)
	}
	start := time.Now()
	rec, more, err := h.srv.Follow(ctx, "alice", inv.ID, state, len(live), 300*time.Millisecond)
	if err != nil || rec.State != store.Running || len(more) != 0 || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("nothing new: %s %q %v after %s, want running, no chunks, after the bound", rec.State, more, err, time.Since(start))
	}
	if _, _, err := h.srv.Follow(ctx, "bob", inv.ID, "", 0, 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another tenant's: %v", err)
	}
	openGates(t, h.dir)
	for !rec.State.Terminal() {
		if rec, more, err = h.srv.Follow(ctx, "alice", inv.ID, rec.State, len(live), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		live = append(live, more...)
	}
	final := sandbox.Replay(rec.Chunks, rec.Result)
	if rec.State != store.Done || string(rec.Result.Stdout) != "first\nsecond\n" || len(live) > len(final) || !reflect.DeepEqual(live, final[:len(live)]) {
		t.Fatalf("ended %s %q; live %q is not a prefix of the record's %q", rec.State, rec.Result.Stdout, live, final)
	}
}
