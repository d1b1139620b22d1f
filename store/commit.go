package store

import (
	bolt "go.etcd.io/bbolt"
)

// maxGroup bounds how many writes share one transaction.
const maxGroup = 256

// write is one caller's change, applied inside a shared transaction.
type write struct {
	fn   func(*bolt.Tx) error
	done chan error      // for commit
	then func(err error) // for commitAsync
}

// committer is group commit: one goroutine applies every waiting write in
// one transaction and one fsync. A write that arrives alone commits at
// once (no batching delay, unlike bolt's Batch); under load, the writes
// that queue behind a commit share the next one. Each write's fn must fail
// before it changes anything (check, then Put), so one write's error is
// reported to its caller without rolling back the others.
func (s *Store) committer() {
	defer close(s.stopped)
	for first := range s.writes {
		group := []*write{first}
	drain:
		for len(group) < maxGroup {
			select {
			case w, ok := <-s.writes:
				if !ok {
					break drain
				}
				group = append(group, w)
			default:
				break drain
			}
		}
		errs := make([]error, len(group))
		err := s.db.Update(func(tx *bolt.Tx) error {
			for i, w := range group {
				errs[i] = w.fn(tx)
			}
			return nil
		})
		for i, w := range group {
			if err != nil {
				errs[i] = err
			}
			if w.then != nil {
				w.then(errs[i])
			} else {
				w.done <- errs[i]
			}
		}
	}
}

// commit applies fn in a (shared) write transaction and returns its error
// once the transaction is durable.
func (s *Store) commit(fn func(*bolt.Tx) error) error {
	w := &write{fn: fn, done: make(chan error, 1)}
	s.writes <- w
	return <-w.done
}

// commitAsync queues fn and returns at once; then runs on the committer
// once fn is durable (or failed). Writes queued by one goroutine commit in
// the order it queued them, with its synchronous writes too.
func (s *Store) commitAsync(fn func(*bolt.Tx) error, then func(error)) {
	s.writes <- &write{fn: fn, then: then}
}
