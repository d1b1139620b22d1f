package session

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// waitEnded waits until w's exec has a durable end and returns its record.
func waitEnded(t *testing.T, m *Manager, tenant, id, eid string) store.Exec {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		w, err := m.Watch(tenant, id, eid)
		if err != nil {
			t.Fatal(err)
		}
		if w.Live == nil {
			return w.Record
		}
	}
	t.Fatalf("exec %s never ended", eid)
	return store.Exec{}
}

// TestStartStreamsAndReplays: an exec started without waiting streams its
// chunks to a watcher while it runs; once ended, its record replays the
// same chunks (the sequence a late reader numbers them by) and holds the
// result.
func TestStartStreamsAndReplays(t *testing.T) {
	fx := newFixture(t, 4)
	v := fx.create(t, "acme", Spec{})
	box := fx.boxes[0]
	box.gate = make(chan struct{})
	rec, err := fx.m.Start(context.Background(), "acme", v.ID, &sandbox.Exec{ID: "e1", Argv: []string{"live"}})
	if err != nil || rec.ID != "e1" || rec.State != store.ExecRunning {
		t.Fatalf("start: %+v %v", rec, err)
	}
	w, err := fx.m.Watch("acme", v.ID, "e1")
	if err != nil || w.Live == nil {
		t.Fatalf("watch a running exec: %+v %v", w, err)
	}
	var seen []sandbox.Chunk
	for len(seen) < 2 {
		chunks, ended, wake := w.Live.Read(len(seen))
		seen = append(seen, chunks...)
		if ended {
			t.Fatal("the exec ended before its gate opened")
		}
		if len(seen) < 2 {
			<-wake
		}
	}
	want := []sandbox.Chunk{{Stream: sandbox.Stdout, Data: []byte("first")}, {Stream: sandbox.Stderr, Data: []byte("warn")}}
	if !reflect.DeepEqual(seen, want) {
		t.Fatalf("live chunks %q, want %q", seen, want)
	}
	// A second exec waits its turn; the id the first took is a conflict.
	if _, err := fx.m.Start(context.Background(), "acme", v.ID, &sandbox.Exec{ID: "e1", Argv: []string{"x"}}); sandbox.ClassOf(err) != sandbox.Conflict {
		t.Fatalf("reused exec id: %v", err)
	}
	close(box.gate)
	final := waitEnded(t, fx.m, "acme", v.ID, "e1")
	if final.State != store.ExecDone || string(final.Result.Stdout) != "firstsecond" {
		t.Fatalf("record %+v", final)
	}
	got := sandbox.Replay(final.Chunks, final.Result)
	want = append(want, sandbox.Chunk{Stream: sandbox.Stdout, Data: []byte("second")})
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("replayed %q, want %q (live order, same cuts)", got, want)
	}
	// Ended, the id is still taken.
	if _, err := fx.m.Start(context.Background(), "acme", v.ID, &sandbox.Exec{ID: "e1", Argv: []string{"x"}}); sandbox.ClassOf(err) != sandbox.Conflict {
		t.Fatalf("reused exec id after its end: %v", err)
	}
}

// TestWatchTenancy: another tenant's session, or an exec the session does
// not have, is the same NotFound as a missing one.
func TestWatchTenancy(t *testing.T) {
	fx := newFixture(t, 4)
	v := fx.create(t, "acme", Spec{})
	if _, err := fx.m.Exec(context.Background(), "acme", v.ID, &sandbox.Exec{ID: "e1", Argv: []string{"echo"}}); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, fx.m, "acme", v.ID, "e1")
	_, other := fx.m.Watch("beta", v.ID, "e1")
	_, missing := fx.m.Watch("beta", "0123456789abcdef0123456789abcdef", "e1")
	if other == nil || missing == nil || other.Error() != "not-found (id): no session "+v.ID {
		t.Fatalf("another tenant's exec: %v", other)
	}
	_, noExec := fx.m.Watch("acme", v.ID, "e2")
	if want := "not-found (exec): no exec e2 in session " + v.ID; noExec == nil || noExec.Error() != want {
		t.Fatalf("unknown exec: %v, want %s", noExec, want)
	}
	// Bad input changes nothing: no record, the session goes on.
	if _, err := fx.m.Start(context.Background(), "acme", v.ID, &sandbox.Exec{ID: "bad id!", Argv: []string{"x"}}); sandbox.ClassOf(err) != sandbox.BadInput {
		t.Fatalf("bad exec id: %v", err)
	}
	if _, err := fx.st.GetExec(v.ID, "bad id!"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused exec was recorded: %v", err)
	}
}

// TestRecoverInterruptsExecs: an exec running at a stop is recorded
// interrupted at the next start-up, never left running.
func TestRecoverInterruptsExecs(t *testing.T) {
	fx := newFixture(t, 4)
	done := make(chan error, 1)
	fx.st.BeginExec(store.Exec{ID: "e1", Session: "s1", Tenant: "acme", State: store.ExecRunning}, func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := fx.m.Recover(fx.now); err != nil {
		t.Fatal(err)
	}
	rec, err := fx.st.GetExec("s1", "e1")
	if err != nil || rec.State != store.ExecInterrupted || rec.Result == nil || rec.Result.Class != sandbox.Lost {
		t.Fatalf("after recover: %+v %v", rec, err)
	}
}
