package store

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// TestPluginKV: data is kept per plugin and tenant, the quota counts keys
// and values and refuses a write that would pass it (writing nothing),
// usage follows overwrites and deletes, and removing a plugin removes its
// data for every tenant while replacing it keeps the data.
func TestPluginKV(t *testing.T) {
	s, err := Open(t.TempDir(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	get := func(plugin, tenant, key string) string {
		t.Helper()
		v, ok, err := s.KVGet(plugin, tenant, key)
		must(err)
		if !ok {
			return "<none>"
		}
		return string(v)
	}
	must(s.PutPlugin(Plugin{Name: "p", Component: "sha256:1"}, []byte("wasm")))
	must(s.KVSet("p", "alice", "k", []byte("v1"), 10))
	must(s.KVSet("p", "bob", "k", []byte("b"), 10))
	must(s.KVSet("q", "alice", "k", []byte("q"), 10))
	if got := get("p", "alice", "k") + get("p", "bob", "k") + get("q", "alice", "k") + get("p", "carol", "k"); got != "v1bq<none>" {
		t.Fatalf("values %q", got)
	}
	must(s.KVSet("p", "alice", "k", []byte("v2345"), 10)) // 1+5 bytes in use
	if err := s.KVSet("p", "alice", "k2", []byte("xyz12"), 10); !errors.Is(err, ErrKVQuota) {
		t.Fatalf("over quota: %v", err)
	}
	if got := get("p", "alice", "k2"); got != "<none>" {
		t.Fatalf("a refused write was kept: %q", got)
	}
	if n, _ := s.KVUsage("p", "alice"); n != 6 {
		t.Fatalf("usage %d, want 6", n)
	}
	must(s.KVSet("p", "alice", "ka", []byte("1"), 10))
	keys, more, err := s.KVKeys("p", "alice", "k", 1)
	must(err)
	if !reflect.DeepEqual(keys, []string{"k"}) || !more {
		t.Fatalf("keys %v more %v", keys, more)
	}
	if found, err := s.KVDelete("p", "alice", "k"); !found || err != nil {
		t.Fatalf("delete: %v %v", found, err)
	}
	if n, _ := s.KVUsage("p", "alice"); n != 3 {
		t.Fatalf("usage after delete %d, want 3", n)
	}
	if err := s.KVSet("p", "alice", "\x00", []byte("x"), 10); err == nil {
		t.Fatal("the usage key was writable")
	}
	must(s.PutPlugin(Plugin{Name: "p", Component: "sha256:2"}, []byte("wasm2"))) // an upgrade
	if got := get("p", "alice", "ka"); got != "1" {
		t.Fatalf("replacing the plugin lost its data: %q", got)
	}
	must(s.DeletePlugin("p"))
	if got := get("p", "alice", "ka") + get("p", "bob", "k") + get("q", "alice", "k"); got != "<none><none>q" {
		t.Fatalf("after removing p: %q", got)
	}
}

// TestPluginKVApply: a write set is applied whole or not at all: the
// quota is judged on the bytes in use after every entry (a delete makes
// room for a later set), an invalid key or a set passing the quota writes
// nothing, and the dump returns exactly what is kept, in key order.
func TestPluginKVApply(t *testing.T) {
	s, err := Open(t.TempDir(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dump := func() []KVEntry {
		t.Helper()
		d, err := s.KVDump("p", "alice")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := dump(); len(d) != 0 {
		t.Fatalf("empty dump %+v", d)
	}
	if err := s.KVApply("p", "alice", []KVEntry{{Key: "b", Value: []byte("22")}, {Key: "a", Value: []byte("1")}, {Key: "e"}}, 10); err != nil {
		t.Fatal(err)
	}
	want := []KVEntry{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("22")}, {Key: "e", Value: []byte{}}}
	if d := dump(); !reflect.DeepEqual(d, want) {
		t.Fatalf("dump %+v, want %+v", d, want)
	}
	// 6 bytes in use; deleting b (3) makes room for c (1+6=7): 3-3+7 > 10 is refused...
	if err := s.KVApply("p", "alice", []KVEntry{{Key: "b", Delete: true}, {Key: "c", Value: []byte("xxxxxxx")}}, 10); !errors.Is(err, ErrKVQuota) {
		t.Fatalf("over quota: %v", err)
	}
	if d := dump(); !reflect.DeepEqual(d, want) {
		t.Fatalf("a refused write set changed the data: %+v", d)
	}
	// ...and 3-3+6 = 6 is not; the later entry of a key wins.
	if err := s.KVApply("p", "alice", []KVEntry{{Key: "b", Delete: true}, {Key: "c", Value: []byte("x")}, {Key: "c", Value: []byte("xxxxx")}}, 10); err != nil {
		t.Fatal(err)
	}
	want = []KVEntry{{Key: "a", Value: []byte("1")}, {Key: "c", Value: []byte("xxxxx")}, {Key: "e", Value: []byte{}}}
	if d := dump(); !reflect.DeepEqual(d, want) {
		t.Fatalf("dump %+v, want %+v", d, want)
	}
	if n, _ := s.KVUsage("p", "alice"); n != 1+1+1+5+1 {
		t.Fatalf("usage %d, want 9", n)
	}
	for _, bad := range []string{"", "\x00"} {
		if err := s.KVApply("p", "alice", []KVEntry{{Key: "z", Value: []byte("1")}, {Key: bad, Value: []byte("x")}}, 10); err == nil {
			t.Fatalf("key %q accepted", bad)
		}
	}
	if d := dump(); !reflect.DeepEqual(d, want) {
		t.Fatalf("a refused write set changed the data: %+v", d)
	}
}
