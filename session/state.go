package session

import (
	"fmt"
	"slices"
	"time"

	"github.com/wovyr/wovyr/store"
)

// legal is the table of transitions: from a state, the states it may move
// to. Terminal states have none. A paused session survives a restart of
// the daemon, so it is never interrupted: it resumes or ends.
var legal = map[store.SessionState][]store.SessionState{
	store.SessionCreating: {store.SessionRunning, store.SessionEnded, store.SessionInterrupted},
	store.SessionRunning:  {store.SessionPaused, store.SessionEnded, store.SessionInterrupted},
	store.SessionPaused:   {store.SessionRunning, store.SessionEnded},
}

// TransitionError is an illegal transition: a programmer error in this
// package (a request in the wrong state is an ordinary Conflict), named by
// both states so that the log says which path went wrong.
type TransitionError struct {
	ID       string
	From, To store.SessionState
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("session %s: illegal transition %s → %s", e.ID, e.From, e.To)
}

// transition moves rec to state to at now, for reason, if the table allows
// it; otherwise it changes nothing and returns a *TransitionError.
func transition(rec *store.Session, to store.SessionState, reason string, now time.Time) error {
	if !slices.Contains(legal[rec.State], to) {
		return &TransitionError{ID: rec.ID, From: rec.State, To: to}
	}
	rec.State = to
	if to.Terminal() {
		rec.EndReason = reason
	}
	rec.Transitions = append(rec.Transitions, store.SessionTransition{State: to, At: now, Reason: reason})
	return nil
}

// Why a session ended (store.Session.EndReason).
const (
	ReasonDeleted        = "deleted"
	ReasonIdle           = "idle-timeout"
	ReasonLifetime       = "max-lifetime"
	ReasonCreateFailed   = "create-failed"
	ReasonBackendFailure = "backend-failure"
	ReasonRestart        = "daemon-restart"
	ReasonShutdown       = "daemon-shutdown"
	ReasonRequested      = "requested"      // paused or resumed on demand
	ReasonResumed        = "resumed"        // by the first request after a pause
	ReasonWorkspaceLost  = "workspace-lost" // a paused session's kept workspace is gone
	ReasonBackendUnfit   = "backend-unfit"  // its backend may no longer hold it (PauseUnfit)
)
