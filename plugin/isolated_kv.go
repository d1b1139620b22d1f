package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// wovyr:host/kv out of process: a call is a transaction.
//
// The runner inside a sandbox cannot reach the node's store, and nothing
// inside the sandbox may: it is the boundary. So the host ships, with each
// call of a plugin granted kv, the calling tenant's data of that plugin
// (at most its quota, 1 MiB by default) as a read-only file; the runner's
// kv functions read and write that copy (snapshotKV), checking keys,
// values and the quota exactly as the host's do; and the runner's answer
// carries the keys the call changed, each with its last value or as
// deleted. The host checks those writes as it checks a guest's (they were
// written inside the sandbox) and applies them in one store transaction,
// whatever the call's end, as an in-process call's writes are kept when it
// traps later.
//
// A call therefore reads the tenant's data as it was when the call began,
// plus its own writes, and its writes land together when it ends: snapshot
// isolation, where an in-process call's operations each land at once.
// Concurrent calls of one tenant that write one key: the later to end
// wins. A runner that dies without answering (its sandbox killed at the
// wall deadline) writes nothing. Where concurrent calls used the quota
// meanwhile, so that this call's writes would pass it, none is applied and
// the call is a typed conflict, never a silent loss. ADR 0042.

// kvFile is the tenant's data in the runner's workspace.
const kvFile = "kv.json"

// snapshotKV is the runner's KVStore: the shipped data of one tenant and
// plugin (the plugin and tenant arguments are those of the one call), and
// what the call wrote.
type snapshotKV struct {
	data    map[string][]byte
	used    int64
	written map[string]bool // keys set or deleted
}

func newSnapshotKV(entries []store.KVEntry) *snapshotKV {
	s := &snapshotKV{data: make(map[string][]byte, len(entries)), written: map[string]bool{}}
	for _, e := range entries {
		if old, ok := s.data[e.Key]; ok {
			s.used -= int64(len(e.Key) + len(old))
		}
		s.data[e.Key] = e.Value
		s.used += int64(len(e.Key) + len(e.Value))
	}
	return s
}

func (s *snapshotKV) KVGet(_, _, key string) ([]byte, bool, error) {
	v, ok := s.data[key]
	return v, ok, nil
}

func (s *snapshotKV) KVSet(_, _, key string, value []byte, quota int64) error {
	used := s.used + int64(len(key)+len(value))
	if old, ok := s.data[key]; ok {
		used -= int64(len(key) + len(old))
	}
	if used > quota {
		return fmt.Errorf("%w: %d bytes would be in use, over %d", store.ErrKVQuota, used, quota)
	}
	s.data[key], s.used, s.written[key] = value, used, true
	return nil
}

func (s *snapshotKV) KVDelete(_, _, key string) (bool, error) {
	old, ok := s.data[key]
	if ok {
		delete(s.data, key)
		s.used -= int64(len(key) + len(old))
		s.written[key] = true
	}
	return ok, nil
}

func (s *snapshotKV) KVKeys(_, _, prefix string, limit int) ([]string, bool, error) {
	var keys []string
	for k := range s.data {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	if len(keys) > limit {
		return keys[:limit], true, nil
	}
	return keys, false, nil
}

func (s *snapshotKV) KVDump(_, _ string) ([]store.KVEntry, error) {
	out := make([]store.KVEntry, 0, len(s.data))
	for _, k := range slices.Sorted(maps.Keys(s.data)) {
		out = append(out, store.KVEntry{Key: k, Value: s.data[k]})
	}
	return out, nil
}

// KVApply is the store's, on the copy: all of ws or, past quota, none.
func (s *snapshotKV) KVApply(_, _ string, ws []store.KVEntry, quota int64) error {
	next := newSnapshotKV(nil)
	next.data, next.used = maps.Clone(s.data), s.used
	for _, w := range ws {
		if w.Delete {
			_, _ = next.KVDelete("", "", w.Key)
		} else if err := next.KVSet("", "", w.Key, w.Value, 1<<62); err != nil {
			return err
		}
	}
	if next.used > quota {
		return fmt.Errorf("%w: %d bytes would be in use, over %d", store.ErrKVQuota, next.used, quota)
	}
	s.data, s.used = next.data, next.used
	for k := range next.written {
		s.written[k] = true
	}
	return nil
}

// writes are the keys the call changed, in byte order: each with its
// value, or deleted.
func (s *snapshotKV) writes() []store.KVEntry {
	out := make([]store.KVEntry, 0, len(s.written))
	for _, k := range slices.Sorted(maps.Keys(s.written)) {
		if v, ok := s.data[k]; ok {
			out = append(out, store.KVEntry{Key: k, Value: v})
		} else {
			out = append(out, store.KVEntry{Key: k, Delete: true})
		}
	}
	return out
}

// kvSnapshot is the file of tenant's data of p that a call ships.
func (p *Plugin) kvSnapshot(tenant string) ([]byte, error) {
	entries, err := p.host.cfg.KV.KVDump(p.manifest.Name, tenant)
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "read the tenant's key-value data")
	}
	return json.Marshal(entries)
}

// errKVWrite is a runner's write the host refuses.
var errKVWrite = errors.New("a key-value write is invalid")

// checkKVWrites checks what a runner says its call wrote as the kv
// functions check a guest's writes: the runner ran inside the sandbox, so
// its answer is the guest's word.
func checkKVWrites(ws []store.KVEntry) error {
	seen := make(map[string]bool, len(ws))
	for _, w := range ws {
		switch {
		case w.Key == "" || len(w.Key) > maxKVKey || strings.ContainsRune(w.Key, 0) || !utf8.ValidString(w.Key):
			return fmt.Errorf("%w: key %.40q", errKVWrite, w.Key)
		case seen[w.Key]:
			return fmt.Errorf("%w: key %.40q written twice", errKVWrite, w.Key)
		case w.Delete && w.Value != nil:
			return fmt.Errorf("%w: key %.40q deleted with a value", errKVWrite, w.Key)
		case len(w.Value) > maxKVValue || !utf8.Valid(w.Value):
			return fmt.Errorf("%w: the value of key %.40q", errKVWrite, w.Key)
		}
		seen[w.Key] = true
	}
	return nil
}

// applyKV applies a runner's writes for tenant, all or none.
func (p *Plugin) applyKV(tenant string, ws []store.KVEntry) error {
	if len(ws) == 0 {
		return nil
	}
	if err := checkKVWrites(ws); err != nil {
		return sandbox.Errorf(sandbox.BackendFailure, "", "the plugin runner's answer: %v; none was applied", err)
	}
	quota := p.host.kvQuota()
	err := p.host.cfg.KV.KVApply(p.manifest.Name, tenant, ws, quota)
	switch {
	case errors.Is(err, store.ErrKVQuota):
		return sandbox.Errorf(sandbox.Conflict, "", "the call's %d key-value writes would take the tenant's data of plugin %s past %d bytes (other calls wrote meanwhile); none was applied",
			len(ws), p.manifest.Name, quota)
	case err != nil:
		return sandbox.Wrap(sandbox.BackendFailure, err, "apply the call's key-value writes")
	}
	return nil
}
