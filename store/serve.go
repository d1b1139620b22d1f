package store

import (
	"encoding/json"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/wovyr/wovyr/sandbox"
)

// Start moves id to Running on backend.
func (s *Store) Start(id, backend string, now time.Time) error {
	return s.Update(id, startFn(backend, now))
}

// StartAsync is Start without waiting for the write to be durable: then
// (if not nil) runs once it is, on the store's committer, so it must not
// block. A later write by the same goroutine is applied after it. Whether
// a crash finds the record queued or running, it becomes lost alike, so
// this transition need not delay the workload.
func (s *Store) StartAsync(id, backend string, now time.Time, then func(error)) {
	s.commitAsync(func(tx *bolt.Tx) error { return s.update(tx, id, startFn(backend, now)) }, func(err error) {
		if then != nil {
			then(err)
		}
	})
}

// BeginAsync is BeginAt without waiting for the write to be durable: then
// runs once it is (or failed: an id already recorded is refused, and
// nothing is written), on the store's committer, so it must not block. A
// write queued after it returns — by any goroutine — is applied after it.
// A non-zero started records, in the same write, the move to Running on
// backend at started (as Start would), for an invocation admitted at once:
// one commit instead of two.
func (s *Store) BeginAsync(inv *sandbox.Invocation, st State, now time.Time, w Where, backend string, started time.Time, then func(error)) {
	rec := newRecord(inv, st, now, w)
	if !started.IsZero() {
		_ = startFn(backend, started)(&rec)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		then(err)
		return
	}
	s.commitAsync(func(tx *bolt.Tx) error { return insertIn(tx, bucketInvocations, "invocation", inv.ID, b) }, then)
}

func startFn(backend string, now time.Time) func(*Invocation) error {
	return func(rec *Invocation) error {
		rec.State = Running
		rec.Backend = backend
		rec.Transitions = append(rec.Transitions, Transition{Running, now})
		return nil
	}
}

// Finished is when rec reached its terminal state; zero if it has not.
func (rec *Invocation) Finished() time.Time {
	if !rec.State.Terminal() || len(rec.Transitions) == 0 {
		return time.Time{}
	}
	return rec.Transitions[len(rec.Transitions)-1].At
}

// PurgeFinished deletes records that reached a terminal state before cutoff
// and returns how many. Unlike Purge it measures retention from the end of
// an invocation, so a long run's result is kept as long as a short one's.
func (s *Store) PurgeFinished(cutoff time.Time) (int, error) {
	return s.purgeWhere(func(rec *Invocation) bool {
		f := rec.Finished()
		return !f.IsZero() && f.Before(cutoff)
	})
}
