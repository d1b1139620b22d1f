package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/wovyr/wovyr/sandbox"
)

// State is an invocation's lifecycle state.
type State string

// Invocation states. Terminal states are Done, Failed and Lost.
const (
	Queued  State = "queued"
	Running State = "running"
	Done    State = "done"   // ran; the result says how it ended
	Failed  State = "failed" // could not run; the result carries the class
	Lost    State = "lost"   // wovyr died while it ran
)

// Terminal reports whether no further transition can happen.
func (s State) Terminal() bool { return s == Done || s == Failed || s == Lost }

// Transition is one state change.
type Transition struct {
	State State     `json:"state"`
	At    time.Time `json:"at"`
}

// Invocation is the durable record of one invocation.
type Invocation struct {
	ID          string          `json:"id"`
	Tenant      string          `json:"tenant"`
	SpecDigest  string          `json:"spec_digest"`
	Backend     string          `json:"backend,omitempty"`
	State       State           `json:"state"`
	Transitions []Transition    `json:"transitions"`
	Result      *sandbox.Result `json:"result,omitempty"`
	Created     time.Time       `json:"created"`
	// Where it ran: the node that accepted and ran it, and that node's
	// region and zone (its operator's config). Empty for a node with no
	// region and for records made before regions.
	Where
	// Chunks cut Result's output as the live event stream sent it
	// (sandbox.OutputMarks), for a replay under the same sequence numbers.
	Chunks []sandbox.OutputMark `json:"chunks,omitempty"`
}

// Digest is the sha256 of the invocation's canonical JSON.
func Digest(inv *sandbox.Invocation) string {
	b, _ := json.Marshal(inv)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Where is where an invocation runs.
type Where struct {
	Region string `json:"region,omitempty"`
	Zone   string `json:"zone,omitempty"`
	Node   string `json:"node,omitempty"`
}

// Begin records inv as accepted in state st. It fails if the id exists, so
// an invocation is never recorded twice.
func (s *Store) Begin(inv *sandbox.Invocation, st State, now time.Time) error {
	return s.BeginAt(inv, st, now, Where{})
}

// BeginAt is Begin for an invocation that runs at w.
func (s *Store) BeginAt(inv *sandbox.Invocation, st State, now time.Time, w Where) error {
	return s.insert(bucketInvocations, "invocation", inv.ID, newRecord(inv, st, now, w))
}

// newRecord is inv's first record: in state st since now, at w.
func newRecord(inv *sandbox.Invocation, st State, now time.Time, w Where) Invocation {
	return Invocation{
		ID: inv.ID, Tenant: inv.Tenant, SpecDigest: Digest(inv), State: st,
		Transitions: []Transition{{st, now}}, Created: now, Where: w,
	}
}

// insert commits rec (a what) under id in bucket; an id already recorded
// is refused.
func (s *Store) insert(bucket []byte, what, id string, rec any) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return s.commit(func(tx *bolt.Tx) error { return insertIn(tx, bucket, what, id, b) })
}

// insertIn puts b under id in bucket inside tx, refusing an id already
// recorded before it writes anything.
func insertIn(tx *bolt.Tx, bucket []byte, what, id string, b []byte) error {
	bk := tx.Bucket(bucket)
	if bk.Get([]byte(id)) != nil {
		return fmt.Errorf("store: %s %s already recorded", what, id)
	}
	return bk.Put([]byte(id), b)
}

// Update applies fn to the record id inside one transaction. A record in a
// terminal state is never changed again.
func (s *Store) Update(id string, fn func(*Invocation) error) error {
	return s.commit(func(tx *bolt.Tx) error { return s.update(tx, id, fn) })
}

// update applies fn to id inside tx; it fails before writing anything.
func (s *Store) update(tx *bolt.Tx, id string, fn func(*Invocation) error) error {
	return updateIn(tx, bucketInvocations, "invocation", id, func(r *Invocation) (bool, string) {
		return r.State.Terminal(), string(r.State)
	}, fn)
}

// updateIn applies fn to the record id of type T (a what) in bucket,
// inside tx, unless state says the record is terminal (and names its
// state); it fails before writing anything.
func updateIn[T any](tx *bolt.Tx, bucket []byte, what, id string, state func(*T) (bool, string), fn func(*T) error) error {
	bk := tx.Bucket(bucket)
	raw := bk.Get([]byte(id))
	if raw == nil {
		return fmt.Errorf("%w: %s %s", ErrNotFound, what, id)
	}
	var rec T
	if err := json.Unmarshal(raw, &rec); err != nil {
		return err
	}
	if done, name := state(&rec); done {
		return fmt.Errorf("store: %s %s is already %s", what, id, name)
	}
	if err := fn(&rec); err != nil {
		return err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return bk.Put([]byte(id), b)
}

// Transition moves id to st, attaching res (if non-nil).
func (s *Store) Transition(id string, st State, res *sandbox.Result, now time.Time) error {
	return s.Finish(id, st, res, nil, now)
}

// Finish is Transition that also records how the output was streamed.
func (s *Store) Finish(id string, st State, res *sandbox.Result, chunks []sandbox.OutputMark, now time.Time) error {
	return s.Update(id, func(rec *Invocation) error {
		rec.Chunks = chunks
		rec.State = st
		rec.Transitions = append(rec.Transitions, Transition{st, now})
		if res != nil {
			rec.Result = res
			if res.Backend != "" {
				rec.Backend = res.Backend
			}
		}
		return nil
	})
}

// Get returns the record of id.
func (s *Store) Get(id string) (Invocation, error) {
	var rec Invocation
	err := s.get(bucketInvocations, id, &rec)
	return rec, err
}

// Each calls fn for every record, in id order, inside one read transaction.
func (s *Store) Each(fn func(Invocation) error) error { return eachIn(s, bucketInvocations, fn) }

// eachIn calls fn for every record of type T in bucket, in key order,
// inside one read transaction.
func eachIn[T any](s *Store, bucket []byte, fn func(T) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(_, v []byte) error {
			var rec T
			if err := json.Unmarshal(v, &rec); err != nil {
				return err
			}
			return fn(rec)
		})
	})
}

// MarkLost turns every non-terminal record into Lost with reason, as
// start-up does after a crash. It returns the ids it changed.
func (s *Store) MarkLost(reason string, now time.Time) ([]string, error) {
	var ids []string
	err := s.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketInvocations)
		return bk.ForEach(func(k, v []byte) error {
			var rec Invocation
			if err := json.Unmarshal(v, &rec); err != nil {
				return err
			}
			if rec.State.Terminal() {
				return nil
			}
			rec.State = Lost
			rec.Transitions = append(rec.Transitions, Transition{Lost, now})
			rec.Result = &sandbox.Result{ID: rec.ID, Class: sandbox.Lost, Error: reason, ExitCode: -1}
			b, err := json.Marshal(rec)
			if err != nil {
				return err
			}
			ids = append(ids, rec.ID)
			return bk.Put(k, b)
		})
	})
	return ids, err
}

// Purge deletes terminal records created before cutoff and returns how many.
func (s *Store) Purge(cutoff time.Time) (int, error) {
	return s.purgeWhere(func(rec *Invocation) bool { return rec.State.Terminal() && rec.Created.Before(cutoff) })
}

// purgeWhere deletes, in one transaction, the invocation records dead
// selects.
func (s *Store) purgeWhere(dead func(*Invocation) bool) (int, error) {
	return purgeBucket(s, bucketInvocations, dead)
}

// purgeBucket deletes, in one transaction, the records of type T in bucket
// that dead selects, and returns how many.
func purgeBucket[T any](s *Store, bucket []byte, dead func(*T) bool) (int, error) {
	n := 0
	err := s.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucket)
		var keys [][]byte
		err := bk.ForEach(func(k, v []byte) error {
			var rec T
			if err := json.Unmarshal(v, &rec); err != nil {
				return err
			}
			if dead(&rec) {
				keys = append(keys, append([]byte(nil), k...))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range keys {
			if err := bk.Delete(k); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}
