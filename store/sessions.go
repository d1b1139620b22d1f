package store

import (
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/wovyr/wovyr/sandbox"
)

// SessionState is a session's lifecycle state. Which transitions are legal
// is package session's table; the store only keeps terminal records
// unchanged.
type SessionState string

// Session states. Ended and Interrupted are terminal.
const (
	SessionCreating    SessionState = "creating"    // admitted; its sandbox is being claimed
	SessionRunning     SessionState = "running"     // its sandbox is live and takes execs
	SessionPaused      SessionState = "paused"      // its sandbox is gone, its workspace kept; the next request resumes it
	SessionEnded       SessionState = "ended"       // deleted, expired or failed: EndReason says which
	SessionInterrupted SessionState = "interrupted" // the daemon stopped while it was live
)

// Terminal reports whether no further transition can happen.
func (s SessionState) Terminal() bool { return s == SessionEnded || s == SessionInterrupted }

// SessionTransition is one state change of a session, with its reason.
type SessionTransition struct {
	State  SessionState `json:"state"`
	At     time.Time    `json:"at"`
	Reason string       `json:"reason,omitempty"`
}

// Session is the durable record of one session. What changes at every
// exec (its last activity) is not recorded: a restart interrupts every
// running session anyway, and a paused one resumes from its record alone.
type Session struct {
	ID      string        `json:"id"`
	Tenant  string        `json:"tenant"`
	Backend string        `json:"backend"`
	State   SessionState  `json:"state"`
	Claim   sandbox.Claim `json:"claim"`
	// IdleTimeout and MaxLifetime are what the session was created with
	// (defaults filled in).
	IdleTimeout time.Duration       `json:"idle_timeout"`
	MaxLifetime time.Duration       `json:"max_lifetime"`
	Created     time.Time           `json:"created"`
	EndReason   string              `json:"end_reason,omitempty"`
	Transitions []SessionTransition `json:"transitions"`
	// Resume says how the session was last paused, and so how it resumes:
	// ResumeSnapshot (its sandbox saved whole, processes and all) or
	// ResumeRestart (its workspace kept, a fresh sandbox started over it;
	// its processes do not survive). Empty until its first pause.
	Resume string `json:"resume,omitempty"`
	// Paused names the saved sandbox of a session paused by snapshot.
	Paused *sandbox.Paused `json:"paused,omitempty"`
	// PausedBytes is the size of the kept workspace while it is paused.
	PausedBytes int64 `json:"paused_bytes,omitempty"`
}

// ResumeRestart is Session.Resume for a session whose backend cannot
// snapshot a live sandbox: its workspace is kept on disk and a fresh
// sandbox of the same backend, claimed the same way, resumes it.
const ResumeRestart = "restart"

// ResumeSnapshot is Session.Resume for a session whose sandbox was saved
// whole (sandbox.Pauser): it resumes with its files and its processes as
// they were.
const ResumeSnapshot = "snapshot"

// BeginSession records rec, which must be new: an id is never recorded
// twice.
func (s *Store) BeginSession(rec Session) error {
	return s.insert(bucketSessions, "session", rec.ID, rec)
}

// UpdateSession applies fn to the record id inside one transaction. A
// terminal record is never changed again; fn fails before it changes
// anything.
func (s *Store) UpdateSession(id string, fn func(*Session) error) error {
	return s.commit(func(tx *bolt.Tx) error {
		return updateIn(tx, bucketSessions, "session", id, func(r *Session) (bool, string) {
			return r.State.Terminal(), string(r.State)
		}, fn)
	})
}

// GetSession returns the record of id.
func (s *Store) GetSession(id string) (Session, error) {
	var rec Session
	err := s.get(bucketSessions, id, &rec)
	return rec, err
}

// EachSession calls fn for every session record, in id order, inside one
// read transaction.
func (s *Store) EachSession(fn func(Session) error) error { return eachIn(s, bucketSessions, fn) }

// PurgeSessions deletes terminal session records whose last transition is
// before cutoff, and returns how many.
func (s *Store) PurgeSessions(cutoff time.Time) (int, error) {
	return purgeBucket(s, bucketSessions, func(rec *Session) bool {
		return rec.State.Terminal() && rec.Transitions[len(rec.Transitions)-1].At.Before(cutoff)
	})
}
