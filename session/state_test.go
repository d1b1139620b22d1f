package session

import (
	"errors"
	"testing"
	"time"

	"github.com/wovyr/wovyr/store"
)

// TestTransitionTable: exactly the table's transitions are legal; an
// illegal one names both states and changes nothing.
func TestTransitionTable(t *testing.T) {
	all := []store.SessionState{store.SessionCreating, store.SessionRunning, store.SessionPaused, store.SessionEnded, store.SessionInterrupted}
	want := map[[2]store.SessionState]bool{
		{store.SessionCreating, store.SessionRunning}:     true,
		{store.SessionCreating, store.SessionEnded}:       true,
		{store.SessionCreating, store.SessionInterrupted}: true,
		{store.SessionRunning, store.SessionEnded}:        true,
		{store.SessionRunning, store.SessionInterrupted}:  true,
		{store.SessionRunning, store.SessionPaused}:       true,
		{store.SessionPaused, store.SessionRunning}:       true,
		{store.SessionPaused, store.SessionEnded}:         true,
	}
	now := time.Unix(5, 0)
	for _, from := range all {
		for _, to := range all {
			rec := store.Session{ID: "s", State: from, Transitions: []store.SessionTransition{{State: from}}}
			err := transition(&rec, to, "why", now)
			if want[[2]store.SessionState{from, to}] {
				if err != nil || rec.State != to || len(rec.Transitions) != 2 || rec.Transitions[1] != (store.SessionTransition{State: to, At: now, Reason: "why"}) {
					t.Errorf("%s → %s: %v %+v", from, to, err, rec)
				}
				continue
			}
			var te *TransitionError
			if !errors.As(err, &te) || err.Error() != "session s: illegal transition "+string(from)+" → "+string(to) ||
				rec.State != from || len(rec.Transitions) != 1 || rec.EndReason != "" {
				t.Errorf("%s → %s: %v %+v", from, to, err, rec)
			}
		}
	}
}
