package store

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Plugin is an installed plugin's record: its manifest as the operator gave
// it (package plugin parses it again at start-up), keyed by name. The
// component's bytes are kept once per digest beside it, so a daemon
// restart installs the same plugins from the store alone.
type Plugin struct {
	Name      string          `json:"name"`
	Manifest  json.RawMessage `json:"manifest"`
	Component string          `json:"component"` // digest, the key of its bytes
	Installed time.Time       `json:"installed"`
}

// PutPlugin records rec and its component's bytes in one transaction,
// replacing a plugin of the same name; bytes no plugin refers to any more
// are deleted.
func (s *Store) PutPlugin(rec Plugin, wasm []byte) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("store: encode: %w", err)
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		old, _ := getPlugin(tx, rec.Name)
		if err := tx.Bucket(bucketComponents).Put([]byte(rec.Component), wasm); err != nil {
			return err
		}
		if err := tx.Bucket(bucketPlugins).Put([]byte(rec.Name), b); err != nil {
			return err
		}
		if old != nil && old.Component != rec.Component {
			return dropUnused(tx, old.Component)
		}
		return nil
	})
}

// DeletePlugin removes the plugin name (ErrNotFound if none), every
// tenant's key-value data of it, and, when no other plugin uses them, its
// component's bytes. (Replacing a plugin with PutPlugin keeps its data.)
func (s *Store) DeletePlugin(name string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		old, err := getPlugin(tx, name)
		if err != nil {
			return err
		}
		if err := tx.Bucket(bucketPlugins).Delete([]byte(name)); err != nil {
			return err
		}
		if err := dropKV(tx, name); err != nil {
			return err
		}
		return dropUnused(tx, old.Component)
	})
}

// EachPlugin calls fn with every installed plugin and its component's
// bytes, by name. The bytes are valid only during the call.
func (s *Store) EachPlugin(fn func(rec Plugin, wasm []byte) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		comps := tx.Bucket(bucketComponents)
		return tx.Bucket(bucketPlugins).ForEach(func(_, v []byte) error {
			var rec Plugin
			if err := json.Unmarshal(v, &rec); err != nil {
				return err
			}
			return fn(rec, comps.Get([]byte(rec.Component)))
		})
	})
}

func getPlugin(tx *bolt.Tx, name string) (*Plugin, error) {
	v := tx.Bucket(bucketPlugins).Get([]byte(name))
	if v == nil {
		return nil, fmt.Errorf("%w: plugin %s", ErrNotFound, name)
	}
	var rec Plugin
	if err := json.Unmarshal(v, &rec); err != nil {
		return nil, err
	}
	return &rec, nil
}

// dropUnused deletes the bytes of digest unless a plugin still names it.
func dropUnused(tx *bolt.Tx, digest string) error {
	used := false
	err := tx.Bucket(bucketPlugins).ForEach(func(_, v []byte) error {
		var rec Plugin
		if json.Unmarshal(v, &rec) == nil && rec.Component == digest {
			used = true
		}
		return nil
	})
	if err != nil || used {
		return err
	}
	return tx.Bucket(bucketComponents).Delete([]byte(digest))
}
