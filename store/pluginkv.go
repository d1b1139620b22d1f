package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// A plugin's key-value data (wovyr:host/kv) lives under plugin-kv/<plugin>/<tenant>:
// one bucket per plugin, so removing the plugin removes it all, and one per
// tenant inside, so no key is ever looked up outside its tenant's bucket.
// Each tenant bucket keeps its bytes in use (keys plus values) under
// usageKey, which no valid key can equal, so a quota costs no scan.

// ErrKVQuota means a write would take a tenant's data of a plugin past its
// quota; nothing was written.
var ErrKVQuota = errors.New("store: key-value quota exceeded")

var usageKey = []byte{0}

func kvBucket(tx *bolt.Tx, plugin, tenant string, create bool) (*bolt.Bucket, error) {
	root := tx.Bucket(bucketPluginKV)
	if !create {
		p := root.Bucket([]byte(plugin))
		if p == nil {
			return nil, nil
		}
		return p.Bucket([]byte(tenant)), nil
	}
	p, err := root.CreateBucketIfNotExists([]byte(plugin))
	if err != nil {
		return nil, err
	}
	return p.CreateBucketIfNotExists([]byte(tenant))
}

func usage(b *bolt.Bucket) int64 {
	if v := b.Get(usageKey); len(v) == 8 {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

// KVGet returns tenant's value of key in plugin's store, and whether there
// is one.
func (s *Store) KVGet(plugin, tenant, key string) (value []byte, ok bool, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		b, err := kvBucket(tx, plugin, tenant, false)
		if b == nil || err != nil {
			return err
		}
		if v := b.Get([]byte(key)); v != nil {
			value, ok = bytes.Clone(v), true
		}
		return nil
	})
	return value, ok, err
}

// KVSet sets tenant's key to value in plugin's store, unless the tenant's
// bytes in use there (keys plus values) would pass quota (ErrKVQuota).
// Callers validate keys: non-empty, and never a lone NUL byte.
func (s *Store) KVSet(plugin, tenant, key string, value []byte, quota int64) error {
	if key == "" || key == string(usageKey) {
		return fmt.Errorf("store: invalid key-value key %q", key)
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		b, err := kvBucket(tx, plugin, tenant, true)
		if err != nil {
			return err
		}
		used := usage(b)
		if old := b.Get([]byte(key)); old != nil {
			used -= int64(len(key) + len(old))
		}
		used += int64(len(key) + len(value))
		if used > quota {
			return fmt.Errorf("%w: %d bytes would be in use, over %d", ErrKVQuota, used, quota)
		}
		if err := b.Put([]byte(key), value); err != nil {
			return err
		}
		return b.Put(usageKey, binary.BigEndian.AppendUint64(nil, uint64(used)))
	})
}

// KVDelete deletes tenant's key in plugin's store and says whether it was
// there.
func (s *Store) KVDelete(plugin, tenant, key string) (bool, error) {
	if key == string(usageKey) {
		return false, nil
	}
	found := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := kvBucket(tx, plugin, tenant, false)
		if b == nil || err != nil {
			return err
		}
		old := b.Get([]byte(key))
		if old == nil {
			return nil
		}
		found = true
		used := usage(b) - int64(len(key)+len(old))
		if err := b.Delete([]byte(key)); err != nil {
			return err
		}
		return b.Put(usageKey, binary.BigEndian.AppendUint64(nil, uint64(max(used, 0))))
	})
	return found, err
}

// KVKeys returns up to limit of tenant's keys in plugin's store that start
// with prefix, in byte order, and whether more were left out.
func (s *Store) KVKeys(plugin, tenant, prefix string, limit int) (keys []string, more bool, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		b, err := kvBucket(tx, plugin, tenant, false)
		if b == nil || err != nil {
			return err
		}
		c := b.Cursor()
		p := []byte(prefix)
		for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
			if bytes.Equal(k, usageKey) {
				continue
			}
			if len(keys) == limit {
				more = true
				break
			}
			keys = append(keys, string(k))
		}
		return nil
	})
	return keys, more, err
}

// KVEntry is one key of a tenant's data in a plugin's store: its value,
// or, in a write set (KVApply), Delete.
type KVEntry struct {
	Key    string `json:"k"`
	Value  []byte `json:"v,omitempty"`
	Delete bool   `json:"d,omitempty"`
}

// KVDump returns every key and value of tenant's data in plugin's store,
// in byte order of the keys.
func (s *Store) KVDump(plugin, tenant string) ([]KVEntry, error) {
	var out []KVEntry
	err := s.db.View(func(tx *bolt.Tx) error {
		b, err := kvBucket(tx, plugin, tenant, false)
		if b == nil || err != nil {
			return err
		}
		return b.ForEach(func(k, v []byte) error {
			if !bytes.Equal(k, usageKey) {
				out = append(out, KVEntry{Key: string(k), Value: bytes.Clone(v)})
			}
			return nil
		})
	})
	return out, err
}

// KVApply writes ws (sets, and deletes where Delete is set) into tenant's
// data in plugin's store in one transaction: all of them, or, where the
// bytes in use afterwards would pass quota (ErrKVQuota) or a key is
// invalid, none. A later entry of the same key wins.
func (s *Store) KVApply(plugin, tenant string, ws []KVEntry, quota int64) error {
	for _, w := range ws {
		if w.Key == "" || w.Key == string(usageKey) {
			return fmt.Errorf("store: invalid key-value key %q", w.Key)
		}
	}
	if len(ws) == 0 {
		return nil
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		b, err := kvBucket(tx, plugin, tenant, true)
		if err != nil {
			return err
		}
		used := usage(b)
		for _, w := range ws {
			if old := b.Get([]byte(w.Key)); old != nil {
				used -= int64(len(w.Key) + len(old))
			}
			if w.Delete {
				err = b.Delete([]byte(w.Key))
			} else {
				used += int64(len(w.Key) + len(w.Value))
				err = b.Put([]byte(w.Key), append([]byte{}, w.Value...))
			}
			if err != nil {
				return err
			}
		}
		if used > quota {
			return fmt.Errorf("%w: %d bytes would be in use, over %d", ErrKVQuota, used, quota)
		}
		return b.Put(usageKey, binary.BigEndian.AppendUint64(nil, uint64(max(used, 0))))
	})
}

// KVUsage returns the bytes tenant uses in plugin's store.
func (s *Store) KVUsage(plugin, tenant string) (int64, error) {
	var n int64
	err := s.db.View(func(tx *bolt.Tx) error {
		b, err := kvBucket(tx, plugin, tenant, false)
		if b != nil {
			n = usage(b)
		}
		return err
	})
	return n, err
}

func dropKV(tx *bolt.Tx, plugin string) error {
	err := tx.Bucket(bucketPluginKV).DeleteBucket([]byte(plugin))
	if errors.Is(err, bolt.ErrBucketNotFound) {
		return nil
	}
	return err
}
