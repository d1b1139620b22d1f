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
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/wovyr/wovyr/cert"
)

var (
	bucketCerts       = []byte("certs")
	bucketInvocations = []byte("invocations")
)

// ErrLocked means another process (a running daemon, most likely) holds
// the state directory.
var ErrLocked = errors.New("store: state directory is in use by another wovyr process")

// ErrNotFound is returned for an unknown record.
var ErrNotFound = errors.New("store: not found")

// Store is an open state store. It is safe for concurrent use.
type Store struct {
	db *bolt.DB
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
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketCerts, bucketInvocations} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("store: init: %w", err)
	}
	return &Store{db: db}, nil
}

// Close closes the store.
func (s *Store) Close() error { return s.db.Close() }

// PutCert stores r as the current certification of its backend.
func (s *Store) PutCert(r cert.Record) error {
	return s.put(bucketCerts, r.Backend, r)
}

// Cert returns the certification of backend, or ErrNotFound.
func (s *Store) Cert(backend string) (cert.Record, error) {
	var r cert.Record
	err := s.get(bucketCerts, backend, &r)
	return r, err
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
