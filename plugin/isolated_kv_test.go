package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/wovyr/wovyr/plugin/plugintest"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// execRunner runs each invocation's runner (ExecMain) in this process over
// a workspace of its files, as a sandbox would, and can rewrite its answer
// (as a runner taken over by its guest could).
type execRunner struct {
	t      testing.TB
	runs   atomic.Int32
	last   *sandbox.Invocation
	tamper func(ans *runnerAnswer)
}

func (r *execRunner) Run(ctx context.Context, inv *sandbox.Invocation) (*sandbox.Result, error) {
	r.runs.Add(1)
	r.last = inv
	dir := r.t.TempDir()
	for _, f := range inv.Workload.Files {
		if err := os.WriteFile(filepath.Join(dir, f.Path), f.Data, os.FileMode(f.Mode)); err != nil {
			return nil, err
		}
	}
	argv := slices.Clone(inv.Workload.Argv[2:]) // past {"/runner", "component-exec"}
	for i, a := range argv {
		if slices.ContainsFunc(inv.Workload.Files, func(f sandbox.File) bool { return f.Path == a }) {
			argv[i] = filepath.Join(dir, a)
		}
	}
	var stdout, stderr bytes.Buffer
	code := ExecMain(ctx, argv, bytes.NewReader(inv.Workload.Stdin), &stdout, &stderr)
	if code == execOK && r.tamper != nil {
		var ans runnerAnswer
		if err := json.Unmarshal(stdout.Bytes(), &ans); err != nil {
			return nil, err
		}
		r.tamper(&ans)
		b, _ := json.Marshal(ans)
		stdout = *bytes.NewBuffer(b)
	}
	return &sandbox.Result{ID: fmt.Sprintf("inv-%d", r.runs.Load()), Backend: "gvisor", Class: sandbox.OK, ExitCode: code,
		Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}, nil
}

// TestIsolatedKV: an untrusted kvdemo, each call run by the runner out of
// process, answers exactly what the in-process host answers (TestKVAndLog)
// — the tenant's own keys, the interface's errors, the quota — because the
// runner gets the tenant's data and its writes come back into the store;
// what a call reads is its tenant's data as the call began. A runner's
// answer is the guest's word: writes of an invalid key or value, of one
// key twice, or for a plugin without kv are refused whole, and a write set
// that concurrent calls pushed past the quota is a conflict; none of them
// changes the store.
func TestIsolatedKV(t *testing.T) {
	wasm := plugintest.JS(t, plugintest.Jco(t), "kvdemo")
	st := openStore(t, t.TempDir())
	defer st.Close()
	run := &execRunner{t: t}
	h := newHost(t, Config{Dir: t.TempDir(), KV: st, KVQuota: 10 << 10, Isolated: run, IsolatedArgv: []string{"/runner", "component-exec"}})
	m := &Manifest{Name: "kvdemo", Component: Digest(wasm), Trust: sandbox.Untrusted, Capabilities: []string{"wovyr:host/log", "wovyr:host/kv"}}
	// Compiled fully at once: the quick code (104 MB) is too large to ship.
	if info, err := h.Load(m, wasm); err != nil || !info.Isolated || info.Code != "optimized" || h.quickCompiles.Load() != 0 {
		t.Fatalf("%+v %v, %d quick compiles", info, err, h.quickCompiles.Load())
	}
	want(t, call(t, h, "alice", "kvdemo", "remember", `["colour", "blue"]`), `{"ok":null}`)
	want(t, call(t, h, "alice", "kvdemo", "remember", `["colour", "red"]`), `{"ok":"blue"}`)
	want(t, call(t, h, "bob", "kvdemo", "remember", `["colour", "green"]`), `{"ok":null}`)
	want(t, call(t, h, "alice", "kvdemo", "forget", `["size"]`), `{"ok":false}`)
	want(t, call(t, h, "alice", "kvdemo", "remember", `["", "x"]`), `{"err":"invalid: a key cannot be empty"}`)
	want(t, call(t, h, "alice", "kvdemo", "fill", `[20, 1000]`), `{"err":"after 10: quota: the tenant's data of this plugin would pass 10240 bytes"}`)
	if used, _ := st.KVUsage("kvdemo", "alice"); used != int64(10*(1000+9)+len("colour")+len("red")) {
		t.Errorf("alice uses %d bytes", used)
	}
	if v, ok, _ := st.KVGet("kvdemo", "bob", "colour"); !ok || string(v) != "green" {
		t.Errorf("bob's colour in the store: %q %v", v, ok)
	}
	// Only the calling tenant's data went in, read-only, with the quota.
	var shipped []store.KVEntry
	if f := run.last.Workload.Files; len(f) != 2 || f[1].Path != kvFile || f[1].Mode != 0o444 || json.Unmarshal(f[1].Data, &shipped) != nil || !reflect.DeepEqual(shipped, []store.KVEntry{{Key: "colour", Value: []byte("red")}}) {
		t.Fatalf("files %d, shipped %d entries", len(f), len(shipped))
	}
	if a := strings.Join(run.last.Workload.Argv, " "); !strings.Contains(a, " -kv kv.json -kv-quota 10240 ") {
		t.Errorf("argv %s", a)
	}
	// A write made while a call ran is not seen by it; the call's own is.
	run.tamper = func(*runnerAnswer) {
		if err := st.KVSet("kvdemo", "bob", "late", []byte("x"), 10<<10); err != nil {
			t.Error(err)
		}
	}
	want(t, call(t, h, "bob", "kvdemo", "names", `[""]`), `{"ok":["colour"]}`)
	run.tamper = nil
	want(t, call(t, h, "bob", "kvdemo", "names", `[""]`), `{"ok":["colour","late"]}`)

	// A runner's writes are checked as a guest's: through a whole call,
	// and then each kind of bad write.
	before, _ := st.KVDump("kvdemo", "alice")
	run.tamper = func(a *runnerAnswer) {
		a.KVWrites = append(a.KVWrites, store.KVEntry{Key: "a\x00b", Value: []byte("x")})
	}
	_, err := h.Call(context.Background(), "alice", "kvdemo", "remember", json.RawMessage(`["colour", "violet"]`), CallOptions{})
	if sandbox.ClassOf(err) != sandbox.BackendFailure || !strings.Contains(err.Error(), "the plugin runner's answer: a key-value write is invalid: key \"a\\x00b\"; none was applied") {
		t.Errorf("a NUL key: %v", err)
	}
	p, err := h.acquire("kvdemo")
	if err != nil {
		t.Fatal(err)
	}
	defer p.release()
	for name, ws := range map[string][]store.KVEntry{
		"an empty key":    {{Key: "", Value: []byte("x")}},
		"a long key":      {{Key: strings.Repeat("k", 513)}},
		"a big value":     {{Key: "k", Value: make([]byte, 65537)}},
		"a binary value":  {{Key: "k", Value: []byte{0xff}}},
		"a key twice":     {{Key: "k", Value: []byte("1")}, {Key: "k", Delete: true}},
		"a valued delete": {{Key: "k", Value: []byte("1"), Delete: true}},
	} {
		ws = append([]store.KVEntry{{Key: "good", Value: []byte("1")}}, ws...)
		if err := p.applyKV("alice", ws); sandbox.ClassOf(err) != sandbox.BackendFailure || !strings.Contains(err.Error(), "a key-value write is invalid") {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Another call took the quota while this one ran: none of its writes.
	run.tamper = func(*runnerAnswer) {
		if err := st.KVSet("kvdemo", "alice", "filler", make([]byte, 130), 10<<10); err != nil {
			t.Error(err)
		}
	}
	_, err = h.Call(context.Background(), "alice", "kvdemo", "remember", json.RawMessage(`["colour", "a-much-longer-colour-name"]`), CallOptions{})
	if sandbox.ClassOf(err) != sandbox.Conflict || !strings.Contains(err.Error(), "past 10240 bytes (other calls wrote meanwhile); none was applied") {
		t.Errorf("quota raced: %v", err)
	}
	if _, err := st.KVDelete("kvdemo", "alice", "filler"); err != nil {
		t.Fatal(err)
	}
	if after, _ := st.KVDump("kvdemo", "alice"); !reflect.DeepEqual(after, before) {
		t.Errorf("refused answers changed alice's data")
	}
	run.tamper = nil
	want(t, call(t, h, "alice", "kvdemo", "recall", `["colour"]`), `{"ok":"red"}`)

	// A plugin without kv gets no data, and may answer no writes.
	calc := component(t, "calc")
	if _, err := h.Load(&Manifest{Name: "calc", Component: Digest(calc), Trust: sandbox.Untrusted}, calc); err != nil {
		t.Fatal(err)
	}
	want(t, call(t, h, "alice", "calc", "add", `[1, 2]`), `3`)
	if len(run.last.Workload.Files) != 1 || strings.Contains(strings.Join(run.last.Workload.Argv, " "), "-kv") {
		t.Errorf("calc's invocation: %+v", run.last.Workload.Argv)
	}
	run.tamper = func(a *runnerAnswer) { a.KVWrites = []store.KVEntry{{Key: "k", Value: []byte("x")}} }
	if _, err := h.Call(context.Background(), "alice", "calc", "add", json.RawMessage(`[1, 2]`), CallOptions{}); sandbox.ClassOf(err) != sandbox.BackendFailure ||
		!strings.Contains(err.Error(), "key-value writes for a plugin without wovyr:host/kv") {
		t.Errorf("writes for calc: %v", err)
	}
	if d, _ := st.KVDump("calc", "alice"); len(d) != 0 {
		t.Errorf("calc's data: %+v", d)
	}
}

// TestSnapshotKVAgreesWithTheStore: the runner's copy answers every
// operation as the node's store does (values, found, key lists, the quota
// refusals) over random operations, and ends holding what the store
// holds; its writes, applied to the store as it was, give the same data.
func TestSnapshotKVAgreesWithTheStore(t *testing.T) {
	st := openStore(t, t.TempDir())
	defer st.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "ab", "abc", "b", "ba", "c"}
	const quota = 40
	for i := range 4 {
		if err := st.KVSet("p", "t", keys[i], []byte(strings.Repeat("s", i)), quota); err != nil {
			t.Fatal(err)
		}
	}
	start, _ := st.KVDump("p", "t")
	kv := newSnapshotKV(start)
	for i := range 2000 {
		k := keys[rng.IntN(len(keys))]
		switch op := rng.IntN(4); op {
		case 0:
			v := []byte(strings.Repeat("v", rng.IntN(20)))
			e1, e2 := st.KVSet("p", "t", k, v, quota), kv.KVSet("", "", k, v, quota)
			if errors.Is(e1, store.ErrKVQuota) != errors.Is(e2, store.ErrKVQuota) || (e1 == nil) != (e2 == nil) {
				t.Fatalf("op %d: set %s: store %v, copy %v", i, k, e1, e2)
			}
		case 1:
			f1, _ := st.KVDelete("p", "t", k)
			f2, _ := kv.KVDelete("", "", k)
			if f1 != f2 {
				t.Fatalf("op %d: delete %s: store %v, copy %v", i, k, f1, f2)
			}
		case 2:
			v1, ok1, _ := st.KVGet("p", "t", k)
			v2, ok2, _ := kv.KVGet("", "", k)
			if ok1 != ok2 || !bytes.Equal(v1, v2) {
				t.Fatalf("op %d: get %s: store %q %v, copy %q %v", i, k, v1, ok1, v2, ok2)
			}
		case 3:
			p, limit := k[:1], 1+rng.IntN(3)
			l1, m1, _ := st.KVKeys("p", "t", p, limit)
			l2, m2, _ := kv.KVKeys("", "", p, limit)
			if !slices.Equal(l1, l2) || m1 != m2 {
				t.Fatalf("op %d: keys %s: store %v %v, copy %v %v", i, p, l1, m1, l2, m2)
			}
		}
	}
	end, _ := st.KVDump("p", "t")
	if got, _ := kv.KVDump("", ""); !reflect.DeepEqual(norm(got), norm(end)) {
		t.Fatalf("copy %v, store %v", got, end)
	}
	// The writes, applied to a store holding the start, give the end.
	st2 := openStore(t, t.TempDir())
	defer st2.Close()
	if err := st2.KVApply("p", "t", start, quota); err != nil {
		t.Fatal(err)
	}
	if err := st2.KVApply("p", "t", kv.writes(), quota); err != nil {
		t.Fatal(err)
	}
	if got, _ := st2.KVDump("p", "t"); !reflect.DeepEqual(norm(got), norm(end)) {
		t.Fatalf("start plus writes %v, store %v", got, end)
	}
	// The copy's own KVApply: all or, past the quota, nothing.
	before, _ := kv.KVDump("", "")
	if err := kv.KVApply("", "", []store.KVEntry{{Key: "z", Value: make([]byte, quota)}}, quota); !errors.Is(err, store.ErrKVQuota) {
		t.Fatalf("copy over quota: %v", err)
	}
	if after, _ := kv.KVDump("", ""); !reflect.DeepEqual(after, before) {
		t.Fatalf("a refused apply changed the copy")
	}
}

// norm makes empty values comparable (nil and empty are one value).
func norm(es []store.KVEntry) []store.KVEntry {
	out := slices.Clone(es)
	for i := range out {
		if len(out[i].Value) == 0 {
			out[i].Value = nil
		}
	}
	return out
}
