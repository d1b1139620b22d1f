package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/wovyr/wovyr/sandbox"
)

// ExecState is a session exec's state.
type ExecState string

// Exec states. All but Running are terminal.
const (
	ExecRunning     ExecState = "running"
	ExecDone        ExecState = "done"        // ran; the result says how it ended
	ExecFailed      ExecState = "failed"      // could not run; the result carries the class
	ExecInterrupted ExecState = "interrupted" // the daemon stopped while it ran
	// ExecKilled is a background exec killed while it ran: by request, or
	// with its session.
	ExecKilled ExecState = "killed"
)

// Terminal reports whether no further transition can happen.
func (s ExecState) Terminal() bool { return s != ExecRunning }

// Exec is the durable record of one exec in a session: what ran, how it
// ended and how its output was cut into the live stream's chunks, so that
// a stream read after the exec ended (or after a restart) replays the same
// events under the same sequence numbers.
type Exec struct {
	ID      string   `json:"id"`
	Session string   `json:"session"`
	Tenant  string   `json:"tenant"`
	Argv    []string `json:"argv"`
	Dir     string   `json:"dir,omitempty"`
	// Background is set for a background exec (sandbox.Exec.Background),
	// Pid to its process's pid inside the sandbox (zero if it could not
	// start).
	Background bool      `json:"background,omitempty"`
	Pid        int       `json:"pid,omitempty"`
	OpenStdin  bool      `json:"open_stdin,omitempty"` // started with a stdin for writes
	State      ExecState `json:"state"`
	Started    time.Time `json:"started"`
	Ended      time.Time `json:"ended,omitzero"`
	// Result is set once terminal: the exec's result, or for a failed one
	// its class and public error with exit code -1.
	Result *sandbox.Result      `json:"result,omitempty"`
	Chunks []sandbox.OutputMark `json:"chunks,omitempty"`
}

// execKey is an exec's key: its session's id, then its own, so that a
// session's execs are adjacent and ids need only be unique per session.
func execKey(session, id string) string { return session + "/" + id }

// BeginExec queues rec, which must be new in its session, and returns at
// once; then runs once it is durable (or failed), on the committer, so it
// must not block. An exec's writes are off its caller's latency: until its
// end is durable, the daemon answers for it from memory.
func (s *Store) BeginExec(rec Exec, then func(error)) {
	s.putExec(rec, func(old *Exec) error { return fmt.Errorf("already recorded (%s)", old.State) }, then)
}

// PutExec queues rec as an exec's end, as BeginExec: it replaces a running
// record of the same exec, or is the first (an exec whose start was not
// recorded); a terminal record is never changed again. Writes queued by one
// goroutine, or one after another's then, commit in that order.
func (s *Store) PutExec(rec Exec, then func(error)) {
	s.putExec(rec, func(old *Exec) error {
		if old.State.Terminal() {
			return fmt.Errorf("already %s", old.State)
		}
		return nil
	}, then)
}

// putExec queues rec's write, unless refuse refuses the record it would
// replace.
func (s *Store) putExec(rec Exec, refuse func(old *Exec) error, then func(error)) {
	b, err := json.Marshal(rec)
	if err != nil {
		then(err)
		return
	}
	key := []byte(execKey(rec.Session, rec.ID))
	s.commitAsync(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketExecs)
		if raw := bk.Get(key); raw != nil {
			var old Exec
			if err := json.Unmarshal(raw, &old); err != nil {
				return err
			}
			if err := refuse(&old); err != nil {
				return fmt.Errorf("store: exec %s: %w", key, err)
			}
		}
		return bk.Put(key, b)
	}, then)
}

// GetExec returns the record of exec id of session.
func (s *Store) GetExec(session, id string) (Exec, error) {
	var rec Exec
	err := s.get(bucketExecs, execKey(session, id), &rec)
	return rec, err
}

// RunningExecs returns session's execs that are not terminal, in id order.
func (s *Store) RunningExecs(session string) ([]Exec, error) {
	var out []Exec
	prefix := []byte(execKey(session, ""))
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketExecs).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var rec Exec
			if err := json.Unmarshal(v, &rec); err != nil {
				return err
			}
			if !rec.State.Terminal() {
				out = append(out, rec)
			}
		}
		return nil
	})
	return out, err
}

// InterruptExecs turns every running exec into interrupted, as start-up
// does after a stop, and returns how many it changed; the background execs
// of a session keep names stay running (a session paused by snapshot,
// whose processes are in its saved sandbox).
func (s *Store) InterruptExecs(now time.Time, keep func(session string) bool) (int, error) {
	n := 0
	err := s.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketExecs)
		return bk.ForEach(func(k, v []byte) error {
			var rec Exec
			if err := json.Unmarshal(v, &rec); err != nil {
				return err
			}
			if rec.State.Terminal() || rec.Background && keep != nil && keep(rec.Session) {
				return nil
			}
			rec.State, rec.Ended = ExecInterrupted, now
			rec.Result = &sandbox.Result{ID: rec.ID, Class: sandbox.Lost, ExitCode: -1, Error: "the daemon stopped while the exec ran"}
			b, err := json.Marshal(rec)
			if err != nil {
				return err
			}
			n++
			return bk.Put(k, b)
		})
	})
	return n, err
}

// PurgeExecs deletes terminal exec records that ended before cutoff and
// returns how many.
func (s *Store) PurgeExecs(cutoff time.Time) (int, error) {
	return purgeBucket(s, bucketExecs, func(rec *Exec) bool { return rec.State.Terminal() && rec.Ended.Before(cutoff) })
}
