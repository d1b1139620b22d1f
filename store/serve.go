package store

import (
	"time"

	bolt "go.etcd.io/bbolt"
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
