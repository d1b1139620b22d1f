package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/server"
	"github.com/wovyr/wovyr/store"
)

func command(argv ...string) *sandbox.Invocation {
	return &sandbox.Invocation{
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: argv, Env: []string{"PATH=/usr/bin:/bin"}},
		Policy:   sandbox.Policy{Trust: sandbox.Trusted},
	}
}

func states(rec *client.Invocation) string {
	var s []string
	for _, tr := range rec.Transitions {
		s = append(s, tr.State)
	}
	return strings.Join(s, ",")
}

// errorBody decodes an error response and checks its code and field.
func errorBody(t *testing.T, resp *http.Response, body []byte, status int, code sandbox.Class, field string) client.ErrorBody {
	t.Helper()
	var eb client.ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil {
		t.Fatalf("status %d body %q: %v", resp.StatusCode, body, err)
	}
	if resp.StatusCode != status || eb.Code != code || eb.Field != field {
		t.Fatalf("got %d %+v, want %d code %s field %q", resp.StatusCode, eb, status, code, field)
	}
	return eb
}

// sleeper is a sleep whose argv no other process has, to find it in /proc.
func sleeper() (argv []string, pattern string) {
	s := fmt.Sprintf("300.%d", time.Now().UnixNano()%1000000)
	return []string{"/bin/sleep", s}, "sleep\x00" + s + "\x00"
}

// alive reports whether some process's command line contains pattern.
func alive(pattern string) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), pattern) {
			return true
		}
	}
	return false
}

func waitState(t *testing.T, c *client.Client, id, state string) *client.Invocation {
	t.Helper()
	for i := 0; i < 500; i++ {
		rec, err := c.Get(context.Background(), id, 0)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State == state {
			return rec
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never reached %s", id, state)
	return nil
}

func TestEndToEnd(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	ctx := context.Background()
	alice, bob, ops := h.client(aliceToken), h.client(bobToken), h.client(opsToken)

	var doneID string
	t.Run("submit and wait", func(t *testing.T) {
		inv := command("/bin/sh", "-c", "echo hello; echo oops >&2; exit 3")
		rec, err := alice.Submit(ctx, inv, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		res := rec.Result
		if rec.State != client.StateDone || rec.Tenant != "alice" || rec.Backend != "native" || res == nil ||
			res.ExitCode != 3 || string(res.Stdout) != "hello\n" || string(res.Stderr) != "oops\n" || res.Class != sandbox.OK {
			t.Fatalf("record %+v result %+v", rec, res)
		}
		if states(rec) != "queued,running,done" || len(rec.SpecDigest) != 64 {
			t.Fatalf("transitions %s digest %q", states(rec), rec.SpecDigest)
		}
		doneID = rec.ID
	})
	t.Run("fetch", func(t *testing.T) {
		rec, err := alice.Get(ctx, doneID, 0)
		if err != nil || rec.State != client.StateDone || string(rec.Result.Stdout) != "hello\n" {
			t.Fatalf("get %+v %v", rec, err)
		}
	})
	t.Run("accepted then long-poll", func(t *testing.T) {
		rec, err := alice.Submit(ctx, command("/bin/sh", "-c", "sleep 0.3; echo late"), 0)
		if err != nil {
			t.Fatal(err)
		}
		if client.Terminal(rec.State) {
			t.Fatalf("without wait the answer is 202 and not final: %s", rec.State)
		}
		rec, err = alice.Get(ctx, rec.ID, 20*time.Second)
		if err != nil || rec.State != client.StateDone || string(rec.Result.Stdout) != "late\n" {
			t.Fatalf("long poll %+v %v", rec, err)
		}
	})
	t.Run("stream", func(t *testing.T) {
		rec, err := alice.Submit(ctx, command("/bin/sh", "-c", "sleep 0.2; echo a; echo b >&2"), 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		var out, errOut string
		err = alice.Events(ctx, rec.ID, func(ev client.Event) error {
			switch ev.Type {
			case client.EventState:
				got = append(got, ev.State)
			case client.EventStdout:
				out += string(ev.Data)
			case client.EventStderr:
				errOut += string(ev.Data)
			case client.EventResult:
				got = append(got, "result:"+ev.Invocation.State)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, ",") != "queued,running,done,result:done" || out != "a\n" || errOut != "b\n" {
			t.Fatalf("events %v stdout %q stderr %q", got, out, errOut)
		}
		// Resuming after event 2 (queued, running) replays the rest with
		// the same ids: the output, which came while it ran, then done.
		resp, body := h.raw("GET", "/v1/invocations/"+rec.ID+"/events", aliceToken, nil, map[string]string{"Last-Event-ID": "2"})
		if resp.StatusCode != 200 || strings.Contains(string(body), "id: 2\n") || !strings.HasPrefix(string(body), "id: 3\nevent: stdout\n") ||
			!strings.Contains(string(body), "id: 5\nevent: state\n") {
			t.Fatalf("resumed stream %d:\n%s", resp.StatusCode, body)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		argv, pattern := sleeper()
		rec, err := alice.Submit(ctx, command(argv...), 0)
		if err != nil {
			t.Fatal(err)
		}
		waitState(t, alice, rec.ID, client.StateRunning)
		for i := 0; i < 100 && !alive(pattern); i++ {
			time.Sleep(10 * time.Millisecond)
		}
		if !alive(pattern) {
			t.Fatal("the workload never appeared")
		}
		rec, err = alice.Cancel(ctx, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != client.StateDone || rec.Result.Class != sandbox.Killed || !strings.Contains(rec.Result.Error, "cancelled by the caller") {
			t.Fatalf("cancelled record %+v", rec.Result)
		}
		if alive(pattern) {
			t.Fatal("the cancelled workload is still running")
		}
		if _, err := alice.Cancel(ctx, rec.ID); !client.IsStatus(err, 409) || !errors.Is(err, server.Conflict) {
			t.Fatalf("second cancel: %v, want 409 conflict", err)
		}
	})
	t.Run("401 without a token", func(t *testing.T) {
		for _, tok := range []string{"", "not-a-token"} {
			resp, body := h.raw("POST", "/v1/invocations", tok, strings.NewReader(`{}`), nil)
			errorBody(t, resp, body, 401, server.Unauthenticated, "")
			if resp.Header.Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
			resp, body = h.raw("GET", "/v1/invocations/"+doneID, tok, nil, nil)
			errorBody(t, resp, body, 401, server.Unauthenticated, "")
		}
	})
	t.Run("404 across tenants", func(t *testing.T) {
		_, err := bob.Get(ctx, doneID, 0)
		if !client.IsStatus(err, 404) || sandbox.ClassOf(err) != server.NotFound {
			t.Fatalf("bob reads alice's invocation: %v", err)
		}
		_, missing := bob.Get(ctx, "nosuchid", 0)
		if missing == nil || err.Error() != strings.Replace(missing.Error(), "nosuchid", doneID, 1) {
			t.Fatalf("another tenant's id must look exactly like a missing one: %q vs %q", err, missing)
		}
		if _, err := bob.Cancel(ctx, doneID); !client.IsStatus(err, 404) {
			t.Fatalf("bob cancels alice's invocation: %v", err)
		}
		resp, body := h.raw("GET", "/v1/invocations/"+doneID+"/events", bobToken, nil, nil)
		errorBody(t, resp, body, 404, server.NotFound, "id")
	})
	t.Run("413 on an oversized body", func(t *testing.T) {
		big := strings.Repeat("x", 70<<10)
		body := `{"workload":{"kind":"command","argv":["/bin/true","` + big + `"]},"policy":{"trust":"trusted"}}`
		resp, rb := h.raw("POST", "/v1/invocations", aliceToken, strings.NewReader(body), nil)
		errorBody(t, resp, rb, 413, server.TooLarge, "")
		// Without a Content-Length the cap holds while reading.
		resp, rb = h.raw("POST", "/v1/invocations", aliceToken, io.MultiReader(strings.NewReader(body)), nil)
		errorBody(t, resp, rb, 413, server.TooLarge, "")
	})
	t.Run("400 on bad input", func(t *testing.T) {
		for _, tc := range []struct{ name, body, field string }{
			{"malformed JSON", `{"workload":`, ""},
			{"not JSON", `hello`, ""},
			{"unknown field", `{"workload":{"kind":"command","argv":["/bin/true"],"nope":1},"policy":{"trust":"trusted"}}`, "nope"},
			{"unknown top-level field", `{"workload":{"kind":"command","argv":["/bin/true"]},"policy":{"trust":"trusted"},"extra":true}`, "extra"},
			{"wrong type", `{"workload":{"kind":"command","argv":"/bin/true"},"policy":{"trust":"trusted"}}`, "workload.argv"},
			{"no trust class", `{"workload":{"kind":"command","argv":["/bin/true"]},"policy":{}}`, "policy.trust"},
			{"client-chosen id", `{"id":"mine","workload":{"kind":"command","argv":["/bin/true"]},"policy":{"trust":"trusted"}}`, "id"},
			{"another tenant", `{"tenant":"bob","workload":{"kind":"command","argv":["/bin/true"]},"policy":{"trust":"trusted"}}`, "tenant"},
			{"two objects", `{"workload":{"kind":"command","argv":["/bin/true"]},"policy":{"trust":"trusted"}} {}`, ""},
		} {
			resp, body := h.raw("POST", "/v1/invocations?wait=5s", aliceToken, strings.NewReader(tc.body), nil)
			eb := errorBody(t, resp, body, 400, sandbox.BadInput, tc.field)
			t.Logf("%s: %s", tc.name, eb.Message)
		}
		resp, body := h.raw("POST", "/v1/invocations?wait=soon", aliceToken, strings.NewReader(`{}`), nil)
		errorBody(t, resp, body, 400, sandbox.BadInput, "wait")
	})
	t.Run("409 when the floor is unmet", func(t *testing.T) {
		inv := command("/bin/true")
		inv.Policy.Trust = sandbox.Untrusted
		_, err := alice.Submit(ctx, inv, time.Second)
		var fe *client.Error
		if !errors.As(err, &fe) || fe.Status != 409 || fe.Code != sandbox.FloorUnmet {
			t.Fatalf("untrusted on a native-only node: %v", err)
		}
	})
	t.Run("admin only", func(t *testing.T) {
		resp, body := h.raw("POST", "/v1/backends/native/certify", aliceToken, nil, nil)
		errorBody(t, resp, body, 403, server.Forbidden, "")
		resp, body = h.raw("GET", "/metrics", aliceToken, nil, nil)
		errorBody(t, resp, body, 403, server.Forbidden, "")
		resp, body = h.raw("GET", "/metrics", opsToken, nil, nil)
		for _, want := range []string{
			`wovyr_invocations_total{backend="native",class="ok",outcome="done"}`,
			`wovyr_invocations_total{backend="native",class="killed",outcome="done"} 1`,
			`wovyr_phase_seconds_bucket{backend="native",phase="run"`,
			`wovyr_phase_seconds_count{backend="native",phase="queue"}`,
			`wovyr_phase_seconds_count{backend="native",phase="accept"}`,
			`wovyr_phase_seconds_count{backend="native",phase="commit"}`,
			`wovyr_phase_seconds_count{backend="native",phase="respond"}`,
			"wovyr_queue_depth 0",
		} {
			if resp.StatusCode != 200 || !bytes.Contains(body, []byte(want)) {
				t.Fatalf("metrics %d lack %s:\n%s", resp.StatusCode, want, body)
			}
		}
		// Certification through the API needs the battery, which this
		// daemon was not given.
		resp, body = h.raw("POST", "/v1/backends/native/certify", opsToken, nil, nil)
		errorBody(t, resp, body, 503, server.Unavailable, "")
	})
	t.Run("backends and health", func(t *testing.T) {
		sts, err := ops.Backends(ctx)
		if err != nil || len(sts) != 2 || sts[0].Name != "native" || sts[1].Name != "wasm" ||
			!sts[0].Certified || !sts[0].Capability.Available || !sts[1].Certified {
			t.Fatalf("backends %+v %v", sts, err)
		}
		resp, body := h.raw("GET", "/v1/backends?probe=true", aliceToken, nil, nil)
		errorBody(t, resp, body, 403, server.Forbidden, "probe")
		for _, p := range []string{"/healthz", "/readyz"} {
			if resp, _ := h.raw("GET", p, "", nil, nil); resp.StatusCode != 200 {
				t.Fatalf("%s: %d", p, resp.StatusCode)
			}
		}
		if resp, _ := h.raw("GET", "/v1/openapi.yaml", aliceToken, nil, nil); resp.StatusCode != 200 {
			t.Fatalf("openapi: %d", resp.StatusCode)
		}
	})
}

func TestRateGuard(t *testing.T) {
	cfg := testConfig()
	cfg.Tenants[0].Rate, cfg.Tenants[0].Burst = 0.01, 1
	h := newHarness(t, cfg, "")
	body := `{"workload":{"kind":"command","argv":["/bin/true"]},"policy":{"trust":"trusted"}}`
	if resp, b := h.raw("POST", "/v1/invocations?wait=10s", aliceToken, strings.NewReader(body), nil); resp.StatusCode != 200 {
		t.Fatalf("first submission: %d %s", resp.StatusCode, b)
	}
	resp, b := h.raw("POST", "/v1/invocations", aliceToken, strings.NewReader(body), nil)
	errorBody(t, resp, b, 429, server.RateLimited, "")
	if ra := resp.Header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Fatalf("Retry-After %q", ra)
	}
	// The guard is per tenant.
	if resp, b := h.raw("POST", "/v1/invocations?wait=10s", bobToken, strings.NewReader(body), nil); resp.StatusCode != 200 {
		t.Fatalf("bob: %d %s", resp.StatusCode, b)
	}
}

// TestConcurrentSubmissions is the hammer: many tenants' submissions
// released at once (run it under -race); each gets its own id, its own
// output and exactly one record.
func TestConcurrentSubmissions(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	const n = 40
	tokens := []string{aliceToken, bobToken}
	ids := make([]string, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			c := h.client(tokens[i%2])
			rec, err := c.Submit(context.Background(), command("/bin/echo", fmt.Sprint(i)), 30*time.Second)
			for err == nil && !client.Terminal(rec.State) {
				rec, err = c.Get(context.Background(), rec.ID, 30*time.Second)
			}
			if err != nil || rec.State != client.StateDone || string(rec.Result.Stdout) != fmt.Sprint(i)+"\n" {
				t.Errorf("submission %d: %+v %v", i, rec, err)
				return
			}
			ids[i] = rec.ID
		})
	}
	close(start)
	wg.Wait()
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("id %s given twice", id)
		}
		seen[id] = true
	}
	count := 0
	h.store.Each(func(rec store.Invocation) error {
		if seen[rec.ID] {
			count++
		}
		return nil
	})
	if count != n {
		t.Fatalf("%d records for %d submissions", count, n)
	}
}
