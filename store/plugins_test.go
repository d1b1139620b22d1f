package store

import (
	"errors"
	"reflect"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func TestPluginsKeepTheirComponentsOnce(t *testing.T) {
	s, err := Open(t.TempDir(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Unix(1700000000, 0).UTC()
	put := func(name, digest, wasm string) {
		t.Helper()
		if err := s.PutPlugin(Plugin{Name: name, Manifest: []byte(`{"name":"` + name + `"}`), Component: digest, Installed: now}, []byte(wasm)); err != nil {
			t.Fatal(err)
		}
	}
	put("a", "sha256:1", "one")
	put("b", "sha256:1", "one")
	put("a", "sha256:2", "two") // a moves on; b still holds sha256:1
	got := map[string]string{}
	each := func() {
		t.Helper()
		got = map[string]string{}
		if err := s.EachPlugin(func(rec Plugin, wasm []byte) error {
			got[rec.Name] = rec.Component + "=" + string(wasm)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	each()
	if want := map[string]string{"a": "sha256:2=two", "b": "sha256:1=one"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("plugins %v, want %v", got, want)
	}
	if err := s.DeletePlugin("b"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePlugin("b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	var comps []string
	s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketComponents).ForEach(func(k, _ []byte) error { comps = append(comps, string(k)); return nil })
	})
	if !reflect.DeepEqual(comps, []string{"sha256:2"}) {
		t.Fatalf("component bytes kept: %v", comps)
	}
}
