// Package store is wovyr's embedded, durable state: certification records
// and invocation records, in one bbolt file in the state directory.
//
// # Why bbolt
//
// One writer process, small records, point reads and short scans, crash
// safety without a server, and a pure-Go build: bbolt gives ACID
// transactions with fsync on commit and nothing to operate. See
// docs/adr/0001-embedded-store.md.
package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/wovyr/wovyr/cert"
)

var (
	bucketCerts       = []byte("certs")
	bucketInvocations = []byte("invocations")
	bucketProbes      = []byte("probes")
	bucketSessions    = []byte("sessions")
	bucketExecs       = []byte("execs")
	bucketPlugins     = []byte("plugins")
	bucketComponents  = []byte("plugin-components")
	bucketPluginKV    = []byte("plugin-kv")
	buckets           = [][]byte{bucketCerts, bucketInvocations, bucketProbes, bucketSessions, bucketExecs, bucketPlugins, bucketComponents, bucketPluginKV}
)

// ErrLocked means another process (a running daemon, most likely) holds
// the state directory.
var ErrLocked = errors.New("store: state directory is in use by another wovyr process")

// ErrNotFound is returned for an unknown record.
var ErrNotFound = errors.New("store: not found")

// Store is an open state store. It is safe for concurrent use.
type Store struct {
	db      *bolt.DB
	certMu  sync.RWMutex
	certs   []cert.Record // decoded certifications; nil until read
	writes  chan *write   // to the committer (invocation writes)
	stopped chan struct{}
}

// Open opens (creating if needed) the store in dir, waiting up to wait for
// another process to release it.
func Open(dir string, wait time.Duration) (*Store, error) {
	// 0711: sandbox uids must traverse it to their workspaces below it;
	// the database file itself is 0600.
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	db, err := bolt.Open(filepath.Join(dir, "wovyr.db"), 0o600, &bolt.Options{Timeout: wait})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("%w (%s)", ErrLocked, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	if err := createBuckets(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: init: %w", err)
	}
	s := &Store{db: db, writes: make(chan *write), stopped: make(chan struct{})}
	go s.committer()
	return s, nil
}

// createBuckets makes the buckets a new or older store lacks. A store that
// has them all is only read: a write transaction costs two fsyncs, which
// every one-shot command would pay for nothing.
func createBuckets(db *bolt.DB) error {
	missing := false
	err := db.View(func(tx *bolt.Tx) error {
		for _, b := range buckets {
			missing = missing || tx.Bucket(b) == nil
		}
		return nil
	})
	if err != nil || !missing {
		return err
	}
	return db.Update(func(tx *bolt.Tx) error {
		for _, b := range buckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
}

// Close closes the store. No write may be in progress or follow.
func (s *Store) Close() error {
	close(s.writes)
	<-s.stopped
	return s.db.Close()
}

// PutCert stores r under its key, replacing an earlier record of exactly
// that configuration; records of other configurations are kept.
func (s *Store) PutCert(r cert.Record) error {
	s.certMu.Lock()
	defer s.certMu.Unlock()
	s.certs = nil
	return s.put(bucketCerts, r.Key.String(), r)
}

// Cert returns the record certifying exactly k (see cert.Find). The manager
// asks on every selection, so the decoded records are cached; the process
// that holds the store is its only writer, so the cache cannot go stale.
func (s *Store) Cert(k cert.Key) (cert.Record, error) {
	s.certMu.RLock()
	recs := s.certs
	s.certMu.RUnlock()
	if recs == nil {
		s.certMu.Lock()
		if s.certs == nil {
			all, err := s.Certs()
			if err != nil {
				s.certMu.Unlock()
				return cert.Record{}, err
			}
			s.certs = append([]cert.Record{}, all...) // non-nil even when empty
		}
		recs = s.certs
		s.certMu.Unlock()
	}
	return cert.Find(recs, k)
}

// Certs returns every certification record.
func (s *Store) Certs() ([]cert.Record, error) {
	var out []cert.Record
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketCerts).ForEach(func(_, v []byte) error {
			var r cert.Record
			if err := json.Unmarshal(v, &r); err != nil {
				return err
			}
			out = append(out, r)
			return nil
		})
	})
	return out, err
}

func (s *Store) put(bucket []byte, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("store: encode: %w", err)
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Put([]byte(key), b)
	})
}

func (s *Store) get(bucket []byte, key string, v any) error {
	return s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket).Get([]byte(key))
		if b == nil {
			return fmt.Errorf("%w: %s", ErrNotFound, key)
		}
		return json.Unmarshal(b, v)
	})
}
