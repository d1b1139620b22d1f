package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// TestShutdownKillsAfterGrace: a running invocation gets the grace period,
// then is killed and recorded as killed; a queued one never starts and is
// recorded as failed. Nothing is left non-terminal.
func TestShutdownKillsAfterGrace(t *testing.T) {
	cfg := testConfig()
	cfg.Concurrency = 1
	cfg.ShutdownGrace = config.Duration(300 * time.Millisecond)
	h := newHarness(t, cfg, "")
	alice := h.client(aliceToken)
	ctx := context.Background()
	argv, pattern := sleeper()
	running, err := alice.Submit(ctx, command(argv...), 0)
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, alice, running.ID, client.StateRunning)
	queued, err := alice.Submit(ctx, command("/bin/true"), 0)
	if err != nil || queued.State != client.StateQueued {
		t.Fatalf("second submission %+v %v, want queued behind the first", queued, err)
	}
	start := time.Now()
	h.stop()
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("shutdown took %s: the grace was not given", took)
	}
	if alive(pattern) {
		t.Fatal("the running workload survived shutdown")
	}
	st, err := store.Open(h.dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec, _ := st.Get(running.ID)
	if rec.State != store.Done || rec.Result.Class != sandbox.Killed || !strings.Contains(rec.Result.Error, "daemon shutdown") {
		t.Fatalf("running invocation after shutdown: %s %+v", rec.State, rec.Result)
	}
	rec, _ = st.Get(queued.ID)
	if rec.State != store.Failed || rec.Result.Class != sandbox.Killed || !strings.Contains(rec.Result.Error, "before it started") {
		t.Fatalf("queued invocation after shutdown: %s %+v", rec.State, rec.Result)
	}
}

// TestRestartMarksLost: records a previous daemon left running are lost
// with reason daemon-restart after start-up, finished ones are untouched,
// and nothing is re-run.
func TestRestartMarksLost(t *testing.T) {
	dir := stateDir(t)
	st, err := store.Open(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Minute)
	for _, id := range []string{"wasrunning", "wasqueued", "wasdone"} {
		inv := &sandbox.Invocation{ID: id, Tenant: "alice"}
		if err := st.Begin(inv, store.Queued, t0); err != nil {
			t.Fatal(err)
		}
	}
	st.Start("wasrunning", "native", t0)
	st.Start("wasdone", "native", t0)
	st.Transition("wasdone", store.Done, &sandbox.Result{ExitCode: 7, Stdout: []byte("kept")}, t0)
	st.Close()

	h := newHarness(t, testConfig(), dir)
	alice := h.client(aliceToken)
	for _, id := range []string{"wasrunning", "wasqueued"} {
		rec, err := alice.Get(context.Background(), id, 0)
		if err != nil || rec.State != client.StateLost || rec.Result.Class != sandbox.Lost || rec.Result.Error != "daemon-restart" {
			t.Fatalf("%s: %+v %v", id, rec, err)
		}
		if _, err := client.ResultOf(rec); err != nil {
			t.Fatalf("a lost record reads as a result, not an error: %v", err)
		}
	}
	rec, err := alice.Get(context.Background(), "wasdone", 0)
	if err != nil || rec.State != client.StateDone || string(rec.Result.Stdout) != "kept" || rec.Result.ExitCode != 7 {
		t.Fatalf("finished record changed: %+v %v", rec, err)
	}
}

// TestRetentionPurges: finished records older than the retention go.
func TestRetentionPurges(t *testing.T) {
	cfg := testConfig()
	cfg.Retention = config.Duration(50 * time.Millisecond)
	cfg.PurgeEvery = config.Duration(20 * time.Millisecond)
	h := newHarness(t, cfg, "")
	alice := h.client(aliceToken)
	rec, err := alice.Submit(context.Background(), command("/bin/true"), 10*time.Second)
	if err != nil || rec.State != client.StateDone {
		t.Fatalf("%+v %v", rec, err)
	}
	for i := 0; i < 200; i++ {
		if _, err := alice.Get(context.Background(), rec.ID, 0); client.IsStatus(err, 404) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the record outlived its retention")
}

// TestFirstRecordHoldsTheStart: an invocation that admission starts at once
// is recorded queued and running in one write, durable before the answer
// shows its id (ADR 0044); one that waits for capacity is answered queued
// and moves on later, each later write applied after the first.
func TestFirstRecordHoldsTheStart(t *testing.T) {
	cfg := testConfig()
	cfg.Concurrency = 1
	h := newHarness(t, cfg, "")
	alice := h.client(aliceToken)
	ctx := context.Background()
	argv, _ := sleeper()
	first, err := alice.Submit(ctx, command(argv...), 0)
	if err != nil {
		t.Fatal(err)
	}
	if first.State != client.StateRunning || states(first) != "queued,running" {
		t.Fatalf("first answer %s (%s), want running, recorded with its start", first.State, states(first))
	}
	if rec, err := h.store.Get(first.ID); err != nil || rec.State != store.Running || rec.Backend != "native" {
		t.Fatalf("the store holds %+v %v when the id is shown", rec, err)
	}
	second, err := alice.Submit(ctx, command("/bin/true"), 0)
	if err != nil || second.State != client.StateQueued || states(second) != "queued" {
		t.Fatalf("second answer %+v %v, want queued behind the first", second, err)
	}
	if _, err := alice.Cancel(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	done, err := alice.Get(ctx, second.ID, 30*time.Second)
	if err != nil || done.State != client.StateDone || done.Result.ExitCode != 0 || states(done) != "queued,running,done" {
		t.Fatalf("second after the first ended: %+v %v", done, err)
	}
	ended, err := alice.Get(ctx, first.ID, 0)
	if err != nil || states(ended) != "queued,running,done" {
		t.Fatalf("first after its cancel: %+v %v", ended, err)
	}
	for _, rec := range []*client.Invocation{ended, done} {
		for i := 1; i < len(rec.Transitions); i++ {
			if rec.Transitions[i].At.Before(rec.Transitions[i-1].At) {
				t.Fatalf("%s: transitions out of order: %+v", rec.ID, rec.Transitions)
			}
		}
	}
}
