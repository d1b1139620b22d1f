package store

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	bolt "go.etcd.io/bbolt"

	"github.com/wovyr/wovyr/cert"
)

// CertSnapshot is the certification records as they were read, for a
// command that does not hold the store open (it satisfies manager.Certs).
// A record is decoded when it is asked for: a node's records hold hundreds
// of probe outcomes, and decoding them all cost a one-shot command 2 ms
// where it needs one or two.
type CertSnapshot struct {
	mu      sync.Mutex
	raw     map[string][]byte // by Key.String()
	decoded map[string]cert.Record
}

// CertSnapshot copies the certification records out of the store.
func (s *Store) CertSnapshot() (*CertSnapshot, error) {
	c := &CertSnapshot{raw: map[string][]byte{}, decoded: map[string]cert.Record{}}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketCerts).ForEach(func(k, v []byte) error {
			c.raw[string(k)] = append([]byte(nil), v...)
			return nil
		})
	})
	return c, err
}

// Cert returns the record certifying exactly k; when there is none, the
// error says how the newest record of k's backend differs (cert.Find).
func (c *CertSnapshot) Cert(k cert.Key) (cert.Record, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.raw[k.String()]; ok {
		r, err := c.record(k.String())
		if err != nil || r.Key == k {
			return r, err
		}
	}
	var recs []cert.Record
	for key := range c.raw {
		if strings.HasPrefix(key, k.Backend+"|") {
			r, err := c.record(key)
			if err != nil {
				return cert.Record{}, err
			}
			recs = append(recs, r)
		}
	}
	return cert.Find(recs, k)
}

func (c *CertSnapshot) record(key string) (cert.Record, error) {
	if r, ok := c.decoded[key]; ok {
		return r, nil
	}
	var r cert.Record
	if err := json.Unmarshal(c.raw[key], &r); err != nil {
		return cert.Record{}, fmt.Errorf("store: certification %s: %w", key, err)
	}
	c.decoded[key] = r
	return r, nil
}
