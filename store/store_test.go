package store

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/sandbox"
)

func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCertRoundTripAndDurability(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	rec := cert.Record{Key: cert.Key{Backend: "native", RuntimeVersion: "v1", Kernel: "k", ConfigHash: "h"}, Passed: true,
		Outcomes: []cert.Outcome{{ID: 5, Name: "limits", Applies: true, Pass: true, ControlFlagged: true}}}
	if err := s.PutCert(rec); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, dir)
	defer s.Close()
	got, err := s.Cert(rec.Key)
	if err != nil || got.ConfigHash != "h" || len(got.Outcomes) != 1 {
		t.Fatalf("got %+v %v", got, err)
	}
	if _, err := s.Cert(cert.Key{Backend: "gvisor"}); !errors.Is(err, cert.ErrNotCertified) {
		t.Fatalf("unknown backend: %v", err)
	}
	// A second configuration of the same backend is kept beside the first.
	other := rec
	other.ConfigHash = "egress"
	if err := s.PutCert(other); err != nil {
		t.Fatal(err)
	}
	for _, k := range []cert.Key{rec.Key, other.Key} {
		if _, err := s.Cert(k); err != nil {
			t.Fatalf("config %s lost: %v", k.ConfigHash, err)
		}
	}
	k := rec.Key
	k.ConfigHash = "new"
	if _, err := s.Cert(k); !errors.Is(err, cert.ErrNotCertified) || !strings.Contains(err.Error(), "now new") {
		t.Fatalf("changed config: %v", err)
	}
}

func TestSecondOpenIsLocked(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	defer s.Close()
	if _, err := Open(dir, 50*time.Millisecond); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
}

func TestInvocationLifecycle(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	now := time.Unix(1000, 0)
	inv := &sandbox.Invocation{ID: "a1", Tenant: "t"}
	if err := s.Begin(inv, Running, now); err != nil {
		t.Fatal(err)
	}
	if err := s.Begin(inv, Running, now); err == nil {
		t.Fatal("the same id was recorded twice")
	}
	if err := s.Transition("a1", Done, &sandbox.Result{Backend: "native", ExitCode: 3}, now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := s.Transition("a1", Running, nil, now); err == nil {
		t.Fatal("a terminal record changed")
	}
	rec, err := s.Get("a1")
	if err != nil || rec.State != Done || rec.Backend != "native" || rec.Result.ExitCode != 3 || len(rec.Transitions) != 2 {
		t.Fatalf("record %+v %v", rec, err)
	}
}

func TestMarkLostAndPurge(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	t0 := time.Unix(1000, 0)
	for _, id := range []string{"done1", "run1", "queued1"} {
		if err := s.Begin(&sandbox.Invocation{ID: id, Tenant: "t"}, Running, t0); err != nil {
			t.Fatal(err)
		}
	}
	s.Transition("done1", Done, &sandbox.Result{}, t0)
	ids, err := s.MarkLost("daemon-restart", t0.Add(time.Minute))
	if err != nil || len(ids) != 2 {
		t.Fatalf("lost %v %v, want run1 and queued1", ids, err)
	}
	rec, _ := s.Get("run1")
	if rec.State != Lost || rec.Result.Class != sandbox.Lost || rec.Result.Error != "daemon-restart" {
		t.Fatalf("run1 = %+v", rec)
	}
	n, err := s.Purge(t0.Add(time.Second))
	if err != nil || n != 3 {
		t.Fatalf("purged %d %v, want 3", n, err)
	}
	if _, err := s.Get("done1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("purged record still readable: %v", err)
	}
}

func TestStartAndPurgeFinished(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	t0 := time.Unix(1000, 0)
	for _, id := range []string{"old", "new", "running"} {
		if err := s.Begin(&sandbox.Invocation{ID: id, Tenant: "t"}, Queued, t0); err != nil {
			t.Fatal(err)
		}
		if err := s.Start(id, "native", t0.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	s.Transition("old", Done, &sandbox.Result{}, t0.Add(2*time.Second))
	s.Transition("new", Done, &sandbox.Result{}, t0.Add(time.Hour))
	rec, _ := s.Get("running")
	if rec.State != Running || rec.Backend != "native" || len(rec.Transitions) != 2 || !rec.Finished().IsZero() {
		t.Fatalf("running = %+v", rec)
	}
	n, err := s.PurgeFinished(t0.Add(time.Minute))
	if err != nil || n != 1 {
		t.Fatalf("purged %d %v, want only old", n, err)
	}
	for id, want := range map[string]bool{"old": false, "new": true, "running": true} {
		if _, err := s.Get(id); (err == nil) != want {
			t.Errorf("%s present=%v, want %v", id, err == nil, want)
		}
	}
}

// TestGroupCommitIsolatesErrors: concurrent writes share transactions, yet
// a failing write (a duplicate id) fails alone and every other lands.
func TestGroupCommitIsolatesErrors(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	now := time.Unix(1000, 0)
	const n = 200
	errs := make([]error, 2*n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 2 * n {
		wg.Go(func() {
			<-start
			id := fmt.Sprint("id", i%n) // each id twice: one Begin must fail
			if errs[i] = s.Begin(&sandbox.Invocation{ID: id, Tenant: "t"}, Queued, now); errs[i] == nil {
				errs[i] = s.Transition(id, Done, &sandbox.Result{ExitCode: i % n}, now)
			}
		})
	}
	close(start)
	wg.Wait()
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	if failed != n {
		t.Fatalf("%d writes failed, want exactly the %d duplicates", failed, n)
	}
	count := 0
	s.Each(func(rec Invocation) error {
		count++
		if rec.State != Done || fmt.Sprint("id", rec.Result.ExitCode) != rec.ID || len(rec.Transitions) != 2 {
			t.Errorf("record %+v", rec)
		}
		return nil
	})
	if count != n {
		t.Fatalf("%d records, want %d", count, n)
	}
}

// TestBeginAsync: the first record, queued without waiting, holds the start
// when it has one (one write: queued then running, on its backend); a
// transition queued after it, from another goroutine, applies after it; a
// duplicate id is refused to its callback and changes nothing.
func TestBeginAsync(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	t0 := time.Unix(1000, 0)
	await := func(f func(then func(error))) error {
		ch := make(chan error, 1)
		f(func(err error) { ch <- err })
		return <-ch
	}
	inv := &sandbox.Invocation{ID: "a1", Tenant: "t"}
	queued := make(chan error, 1)
	s.BeginAsync(inv, Queued, t0, Where{Node: "n1"}, "native", t0.Add(time.Millisecond), func(err error) { queued <- err })
	done := make(chan error, 1)
	go func() { done <- s.Transition("a1", Done, &sandbox.Result{ExitCode: 7}, t0.Add(time.Second)) }()
	if err := <-queued; err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the terminal write queued after BeginAsync: %v", err)
	}
	rec, err := s.Get("a1")
	want := []Transition{{Queued, t0}, {Running, t0.Add(time.Millisecond)}, {Done, t0.Add(time.Second)}}
	if err != nil || rec.State != Done || rec.Backend != "native" || rec.Node != "n1" || rec.Result.ExitCode != 7 ||
		fmt.Sprint(rec.Transitions) != fmt.Sprint(want) {
		t.Fatalf("record %+v %v, want transitions %v", rec, err, want)
	}

	err = await(func(then func(error)) { s.BeginAsync(inv, Queued, t0.Add(time.Hour), Where{}, "", time.Time{}, then) })
	if err == nil || !strings.Contains(err.Error(), "invocation a1 already recorded") {
		t.Fatalf("duplicate BeginAsync: %v", err)
	}
	if again, _ := s.Get("a1"); !reflect.DeepEqual(again, rec) {
		t.Fatalf("a refused BeginAsync changed the record: %+v", again)
	}

	if err := await(func(then func(error)) {
		s.BeginAsync(&sandbox.Invocation{ID: "b1", Tenant: "t"}, Queued, t0, Where{}, "", time.Time{}, then)
	}); err != nil {
		t.Fatal(err)
	}
	if rec, _ := s.Get("b1"); rec.State != Queued || rec.Backend != "" || len(rec.Transitions) != 1 {
		t.Fatalf("b1 = %+v, want queued only", rec)
	}
}
