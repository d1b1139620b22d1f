package store

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/wovyr/wovyr/probecache"
)

// probesPerBackend bounds the stored answers of one backend: one per
// configuration in use (the one-shot CLI's, the daemon's, certify
// --config's), the newest kept.
const probesPerBackend = 4

func probeKey(backend, key string) []byte { return []byte(backend + "|" + key) }

// CachedProbe returns the probe answer stored for backend under key
// (manager.ProbeCache).
func (s *Store) CachedProbe(backend, key string) (probecache.Record, bool) {
	var r probecache.Record
	err := s.get(bucketProbes, string(probeKey(backend, key)), &r)
	return r, err == nil
}

// PutProbe stores r (manager.ProbeCache) and drops all but the newest
// probesPerBackend answers of its backend.
func (s *Store) PutProbe(r probecache.Record) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketProbes)
		if err := b.Put(probeKey(r.Backend, r.Key), v); err != nil {
			return err
		}
		type entry struct {
			k  []byte
			at int64
		}
		var mine []entry
		prefix := []byte(r.Backend + "|")
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var old probecache.Record
			if json.Unmarshal(v, &old) != nil {
				mine = append(mine, entry{slices.Clone(k), 0}) // unreadable: oldest
				continue
			}
			mine = append(mine, entry{slices.Clone(k), old.At.UnixNano()})
		}
		slices.SortFunc(mine, func(a, b entry) int { return cmp.Compare(b.at, a.at) })
		for _, e := range mine[min(len(mine), probesPerBackend):] {
			if err := b.Delete(e.k); err != nil {
				return err
			}
		}
		return nil
	})
}

// Probes returns every stored probe answer.
func (s *Store) Probes() ([]probecache.Record, error) {
	var out []probecache.Record
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketProbes).ForEach(func(_, v []byte) error {
			var r probecache.Record
			if err := json.Unmarshal(v, &r); err != nil {
				return err
			}
			out = append(out, r)
			return nil
		})
	})
	return out, err
}
