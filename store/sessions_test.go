package store

import (
	"errors"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

func TestSessionRecords(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	t0 := time.Unix(1000, 0).UTC()
	rec := Session{ID: "s1", Tenant: "acme", Backend: "container", State: SessionCreating, Created: t0,
		Claim:       sandbox.Claim{ID: "s1", Tenant: "acme", Policy: sandbox.Policy{Trust: sandbox.Untrusted}},
		Transitions: []SessionTransition{{State: SessionCreating, At: t0}}}
	if err := s.BeginSession(rec); err != nil {
		t.Fatal(err)
	}
	if err := s.BeginSession(rec); err == nil || err.Error() != "store: session s1 already recorded" {
		t.Fatalf("second begin: %v", err)
	}
	end := func(r *Session) error {
		r.State, r.EndReason = SessionEnded, "deleted"
		r.Transitions = append(r.Transitions, SessionTransition{State: SessionEnded, At: t0.Add(time.Minute), Reason: "deleted"})
		return nil
	}
	if err := s.UpdateSession("s1", end); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateSession("s1", end); err == nil || err.Error() != "store: session s1 is already ended" {
		t.Fatalf("update of an ended session: %v", err)
	}
	if err := s.UpdateSession("nope", end); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update of a missing session: %v", err)
	}
	s.Close()
	s = open(t, dir) // durable
	defer s.Close()
	got, err := s.GetSession("s1")
	if err != nil || got.State != SessionEnded || got.EndReason != "deleted" || len(got.Transitions) != 2 || got.Claim.Policy.Trust != sandbox.Untrusted {
		t.Fatalf("reopened: %+v %v", got, err)
	}
	if n, err := s.PurgeSessions(t0.Add(time.Minute)); n != 0 || err != nil {
		t.Fatalf("purge before its end: %d %v", n, err)
	}
	if n, err := s.PurgeSessions(t0.Add(2 * time.Minute)); n != 1 || err != nil {
		t.Fatalf("purge after its end: %d %v", n, err)
	}
	if _, err := s.GetSession("s1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after purge: %v", err)
	}
}
