package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/store"
)

// wovyr:host/kv's bounds (wit/host.wit).
const (
	maxKVKey       = 512
	maxKVValue     = 64 << 10
	defaultKVQuota = 1 << 20 // a tenant's keys and values, per plugin
	maxKVKeys      = 1000    // keys one keys() returns
)

// KVStore holds plugins' key-value data, per plugin and tenant: the
// node's store (*store.Store), or inside the plugin runner the copy its
// host shipped (isolated_kv.go). KVSet and KVApply refuse, with
// store.ErrKVQuota, writes that would take the tenant's keys and values
// past quota; KVDump and KVApply carry an out-of-process call's data in
// and its writes back.
type KVStore interface {
	KVGet(plugin, tenant, key string) (value []byte, ok bool, err error)
	KVSet(plugin, tenant, key string, value []byte, quota int64) error
	KVDelete(plugin, tenant, key string) (bool, error)
	KVKeys(plugin, tenant, prefix string, limit int) (keys []string, more bool, err error)
	KVDump(plugin, tenant string) ([]store.KVEntry, error)
	KVApply(plugin, tenant string, ws []store.KVEntry, quota int64) error
}

// kvCall is the common part of the kv functions: the call's state and its
// key, or the error to return to the guest (never a trap: a bad key is the
// guest's to handle).
func kvCall(ctx context.Context, key string) (*callState, *wasmcapi.Val, error) {
	st := stateOf(ctx)
	if st == nil {
		return nil, nil, noState(hostKV)
	}
	switch {
	case key == "":
		return nil, errMsg("invalid", "a key cannot be empty"), nil
	case len(key) > maxKVKey:
		return nil, errMsg("invalid", fmt.Sprintf("a key is at most %d bytes, this one %d", maxKVKey, len(key))), nil
	case strings.ContainsRune(key, 0):
		return nil, errMsg("invalid", "a key cannot hold NUL"), nil
	}
	return st, nil, nil
}

// kvFailed is the guest's error for a store failure; the node logs why.
func (h *Host) kvFailed(st *callState, err error) *wasmcapi.Val {
	h.cfg.Log.Error("plugin: key-value store", "tenant", st.tenant, "plugin", st.plugin, "err", err)
	return errMsg("unavailable", "the store failed")
}

func (h *Host) kvGet(ctx context.Context, args []wasmcapi.Val) (*wasmcapi.Val, error) {
	st, bad, err := kvCall(ctx, args[0].Str)
	if st == nil {
		return bad, err
	}
	v, ok, err := h.cfg.KV.KVGet(st.plugin, st.tenant, args[0].Str)
	if err != nil {
		return h.kvFailed(st, err), nil
	}
	opt := &wasmcapi.Val{Kind: wasmcapi.KindOption}
	if ok {
		s := str(string(v))
		opt.Payload = &s
	}
	return okVal(opt), nil
}

func (h *Host) kvSet(ctx context.Context, args []wasmcapi.Val) (*wasmcapi.Val, error) {
	st, bad, err := kvCall(ctx, args[0].Str)
	if st == nil {
		return bad, err
	}
	if n := len(args[1].Str); n > maxKVValue {
		return errMsg("invalid", fmt.Sprintf("a value is at most %d bytes, this one %d", maxKVValue, n)), nil
	}
	quota := h.kvQuota()
	err = h.cfg.KV.KVSet(st.plugin, st.tenant, args[0].Str, []byte(args[1].Str), quota)
	switch {
	case errors.Is(err, store.ErrKVQuota):
		return errMsg("quota", fmt.Sprintf("the tenant's data of this plugin would pass %d bytes", quota)), nil
	case err != nil:
		return h.kvFailed(st, err), nil
	}
	return okVal(nil), nil
}

func (h *Host) kvDelete(ctx context.Context, args []wasmcapi.Val) (*wasmcapi.Val, error) {
	st, bad, err := kvCall(ctx, args[0].Str)
	if st == nil {
		return bad, err
	}
	found, err := h.cfg.KV.KVDelete(st.plugin, st.tenant, args[0].Str)
	if err != nil {
		return h.kvFailed(st, err), nil
	}
	return okVal(&wasmcapi.Val{Kind: wasmcapi.KindBool, Bool: found}), nil
}

func (h *Host) kvKeys(ctx context.Context, args []wasmcapi.Val) (*wasmcapi.Val, error) {
	st := stateOf(ctx)
	if st == nil {
		return nil, noState(hostKV)
	}
	keys, _, err := h.cfg.KV.KVKeys(st.plugin, st.tenant, args[0].Str, maxKVKeys)
	if err != nil {
		return h.kvFailed(st, err), nil
	}
	l := wasmcapi.Val{Kind: wasmcapi.KindList, Elems: make([]wasmcapi.Val, len(keys))}
	for i, k := range keys {
		l.Elems[i] = str(k)
	}
	return okVal(&l), nil
}

// kvQuota is the bytes each tenant keeps in each plugin's store.
func (h *Host) kvQuota() int64 {
	if h.cfg.KVQuota > 0 {
		return h.cfg.KVQuota
	}
	return defaultKVQuota
}
