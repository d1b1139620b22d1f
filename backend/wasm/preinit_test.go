package wasm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/wovyr/wovyr/sandbox"
)

// stateWAT is a module whose init export (named %s) grows memory, fills a
// string into the new page, and sets globals of
// every snapshotted type, exported or not; a start function counts its
// runs. _start initialises lazily when init has not run (the way a module
// built for Wizer still works without it), prints what it sees — "L" when
// it had to run init itself, "S" when it started from the snapshot — and
// then overwrites all of that state, as a tenant's code would.
const stateWAT = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1 4)
  (global $ptr (mut i32) (i32.const 0))
  (global $len (mut i32) (i32.const 0))
  (global $counter (mut i32) (i32.const 48))
  (global $started (mut i32) (i32.const 48))
  (global $ready (mut i32) (i32.const 0))
  (global $g64 (export "g64") (mut i64) (i64.const 0))
  (global $f64 (mut f64) (f64.const 0))
  (global $f32 (mut f32) (f32.const 0))
  (global $k i32 (i32.const 7))
  (global $op (mut i32) (i32.const 256))
  (data (i32.const 16) "orig")
  (start $start)
  (func $start (global.set $started (i32.add (global.get $started) (i32.const 1))))
  (func $init (export "%s")
    (local $i i32)
    (drop (memory.grow (i32.const 1)))
    (global.set $ptr (i32.const 65636))
    (loop $l
      (i32.store8 (i32.add (global.get $ptr) (local.get $i)) (i32.add (i32.const 97) (local.get $i)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 26))))
    (global.set $len (i32.const 26))
    (global.set $g64 (i64.const 0x0123456789abcdef))
    (global.set $f64 (f64.const 3.25))
    (global.set $f32 (f32.const -1.5))
    (global.set $counter (i32.const 65))
    (global.set $ready (i32.const 1)))
  (func $put (param $c i32)
    (i32.store8 (global.get $op) (local.get $c))
    (global.set $op (i32.add (global.get $op) (i32.const 1))))
  (func $yn (param $b i32) (call $put (select (i32.const 121) (i32.const 110) (local.get $b))))
  (func (export "_start")
    (local $lazy i32) (local $i i32)
    (if (i32.eqz (global.get $ready)) (then (call $init) (local.set $lazy (i32.const 1))))
    (global.set $op (i32.const 256))
    (call $put (select (i32.const 76) (i32.const 83) (local.get $lazy)))
    (call $put (i32.const 32))
    (call $put (global.get $counter))
    (call $put (global.get $started))
    (call $put (i32.const 32))
    (call $yn (i64.eq (global.get $g64) (i64.const 0x0123456789abcdef)))
    (call $yn (f64.eq (global.get $f64) (f64.const 3.25)))
    (call $yn (f32.eq (global.get $f32) (f32.const -1.5)))
    (call $yn (i32.eq (global.get $k) (i32.const 7)))
    (call $put (i32.const 32))
    (loop $o
      (call $put (i32.load8_u (i32.add (i32.const 16) (local.get $i))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $o (i32.lt_u (local.get $i) (i32.const 4))))
    (call $put (i32.const 32))
    (local.set $i (i32.const 0))
    (loop $s
      (call $put (i32.load8_u (i32.add (global.get $ptr) (local.get $i))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $s (i32.lt_u (local.get $i) (global.get $len))))
    (call $put (i32.const 10))
    (i32.store (i32.const 128) (i32.const 256))
    (i32.store (i32.const 132) (i32.sub (global.get $op) (i32.const 256)))
    (drop (call $fd_write (i32.const 1) (i32.const 128) (i32.const 1) (i32.const 136)))
    (memory.fill (global.get $ptr) (i32.const 88) (global.get $len))
    (i32.store (i32.const 16) (i32.const 0x58585858))
    (global.set $counter (i32.add (global.get $counter) (i32.const 1)))
    (global.set $g64 (i64.const 0))
    (global.set $f64 (f64.const 0))))`

// The outputs of stateWAT: lazily initialised, and from the snapshot.
const (
	lazyOut = "L A1 yyyy orig abcdefghijklmnopqrstuvwxyz\n"
	snapOut = "S A1 yyyy orig abcdefghijklmnopqrstuvwxyz\n"
)

func stateModule(t testing.TB, init string) []byte {
	return mustWat(t, fmt.Sprintf(stateWAT, init))
}

// privateBackend is a backend with a state dir of its own, so that the
// pre-initialised modules on disk are this test's alone.
func privateBackend(t testing.TB, mod ...func(*Config)) *Backend {
	dir := t.TempDir()
	return newBackend(t, append([]func(*Config){func(c *Config) { c.StateDir = dir }}, mod...)...)
}

func runInit(t testing.TB, b *Backend, mod []byte, init string) *sandbox.Result {
	t.Helper()
	in := inv(mod, "state")
	in.Workload.Init = init
	return run(t, b, in)
}

func TestPreinitStartsFromTheInitialisedState(t *testing.T) {
	b := privateBackend(t)
	named := stateModule(t, "init")
	for _, c := range []struct {
		name, init string
		mod        []byte
		want       string
	}{
		{"no init export named: runs as it is", "", named, lazyOut},
		{"named init export", "init", named, snapOut},
		{"wizer.initialize by default", "", stateModule(t, WizerInit), snapOut},
		{"wizer.initialize named", WizerInit, stateModule(t, WizerInit), snapOut},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := runInit(t, b, c.mod, c.init)
			if res.Class != sandbox.OK || res.ExitCode != 0 || string(res.Stdout) != c.want || len(res.Stderr) != 0 {
				t.Fatalf("class %q exit %d stdout %q stderr %q error %q", res.Class, res.ExitCode, res.Stdout, res.Stderr, res.Error)
			}
		})
	}
}

// TestPreinitClonesShareNothing: every instance of one pre-initialised
// module starts from the snapshot, whatever the instances before it (and
// beside it) wrote into its memories and globals.
func TestPreinitClonesShareNothing(t *testing.T) {
	b := privateBackend(t)
	mod := stateModule(t, WizerInit)
	for i := range 3 {
		if res := runInit(t, b, mod, ""); string(res.Stdout) != snapOut {
			t.Fatalf("run %d: stdout %q error %q", i, res.Stdout, res.Error)
		}
	}
	var wg sync.WaitGroup
	outs := make([]string, 16)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i] = string(runInit(t, b, mod, "").Stdout)
		}()
	}
	wg.Wait()
	for i, o := range outs {
		if o != snapOut {
			t.Fatalf("concurrent run %d: stdout %q", i, o)
		}
	}
	if n := b.pre.built.Load(); n != 1 {
		t.Fatalf("pre-initialised %d times, want once", n)
	}
}

// TestPreinitModuleHoldsTheSnapshot checks the rewritten module itself:
// memory minimums, data segments (only the non-zero ranges), globals, and
// neither the init export nor the start section.
func TestPreinitModuleHoldsTheSnapshot(t *testing.T) {
	out, err := preinitialise(context.Background(), stateModule(t, "init"), "init", initBounds{wall: 10e9, memory: 1 << 24})
	if err != nil {
		t.Fatal(err)
	}
	m, err := inspectModule(out)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(m.memories); got != "[{1 2 4}]" {
		t.Fatalf("memories %s", got)
	}
	var exports, sections []string
	for _, e := range m.exports {
		exports = append(exports, e.name)
	}
	for _, s := range m.sections {
		sections = append(sections, fmt.Sprint(s.id))
		if s.id == secData {
			if got := fmt.Sprintf("%x", s.body); got != "02"+"004110"+"0b04"+"6f726967"+"0041e48004"+"0b1a"+fmt.Sprintf("%x", "abcdefghijklmnopqrstuvwxyz")+"" {
				t.Fatalf("data section %s", got)
			}
		}
	}
	if got := strings.Join(exports, ","); got != "memory,g64,_start" {
		t.Fatalf("exports %s", got)
	}
	if got := strings.Join(sections, ","); got != "1,2,3,5,6,7,10,11,0" {
		t.Fatalf("sections %s (the start section 8 must be gone)", got)
	}
	var inits []string
	for _, g := range m.globals {
		inits = append(inits, fmt.Sprintf("%x", g.init))
	}
	// ptr 65636, len 26, counter 'A', started '1', ready 1, g64, 3.25, -1.5, k 7, op 256.
	want := "41e480040b,411a0b,41c1000b,41310b,41010b,42ef9bafcdf8acd191010b,440000000000000a400b,430000c0bf0b,41070b,4180020b"
	if got := strings.Join(inits, ","); got != want {
		t.Fatalf("globals\n got %s\nwant %s", got, want)
	}
}

func TestPreinitArtifactIsPrivateAndReused(t *testing.T) {
	dir := t.TempDir()
	mod := stateModule(t, WizerInit)
	b := newBackend(t, func(c *Config) { c.StateDir = dir })
	if res := runInit(t, b, mod, ""); string(res.Stdout) != snapOut {
		t.Fatalf("stdout %q error %q", res.Stdout, res.Error)
	}
	k := b.pre.key(digest(mod), WizerInit)
	gdir := filepath.Join(preinitDir(dir), Name, k.ID())
	for _, c := range []struct {
		path string
		mode os.FileMode
	}{{gdir, 0o700 | os.ModeDir}, {filepath.Join(gdir, preinitModule), 0o600}, {filepath.Join(gdir, preinitDigest), 0o600}, {filepath.Join(gdir, "meta.json"), 0o600}} {
		st, err := os.Lstat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != c.mode || st.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) {
			t.Fatalf("%s: mode %v uid %d", c.path, st.Mode(), st.Sys().(*syscall.Stat_t).Uid)
		}
	}
	b.Close()

	// A later process finds it and runs init no more.
	b2 := newBackend(t, func(c *Config) { c.StateDir = dir })
	if res := runInit(t, b2, mod, ""); string(res.Stdout) != snapOut {
		t.Fatalf("stdout %q error %q", res.Stdout, res.Error)
	}
	if b2.pre.built.Load() != 0 || b2.pre.found.Load() != 1 {
		t.Fatalf("built %d found %d, want 0 and 1", b2.pre.built.Load(), b2.pre.found.Load())
	}
	b2.Close()

	// A damaged artifact is discarded and made again.
	if err := os.WriteFile(filepath.Join(gdir, preinitModule), []byte("\x00asm\x01\x00\x00\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	b3 := newBackend(t, func(c *Config) { c.StateDir = dir })
	if res := runInit(t, b3, mod, ""); string(res.Stdout) != snapOut {
		t.Fatalf("stdout %q error %q", res.Stdout, res.Error)
	}
	if b3.pre.built.Load() != 1 || b3.pre.found.Load() != 0 {
		t.Fatalf("built %d found %d, want 1 and 0", b3.pre.built.Load(), b3.pre.found.Load())
	}
}

// TestPreinitKeyVoidsOnAnyChange: the module, the init export, the
// configuration and the init bounds are in the key; Reconcile under
// another configuration removes what this one made.
func TestPreinitKeyVoidsOnAnyChange(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, func(c *Config) { c.StateDir = dir })
	mod := stateModule(t, "init")
	base := b.pre.key(digest(mod), "init")
	other := newBackend(t, func(c *Config) { c.StateDir = dir; c.InitWall = 5e9 })
	differ := map[string]string{
		"module":      b.pre.key(digest(stateModule(t, WizerInit)), "init").ID(),
		"init export": b.pre.key(digest(mod), "other").ID(),
		"init bound":  other.pre.key(digest(mod), "init").ID(),
		"config":      newBackend(t, func(c *Config) { c.StateDir = dir; c.EpochTick = 2e6 }).pre.key(digest(mod), "init").ID(),
	}
	for what, id := range differ {
		if id == base.ID() {
			t.Errorf("a changed %s keeps the key %s", what, id)
		}
	}
	if base.Version != "wasmtime 39.0.1" || base.Backend != Name {
		t.Fatalf("key %+v", base)
	}
	if res := runInit(t, b, mod, "init"); string(res.Stdout) != snapOut {
		t.Fatalf("stdout %q error %q", res.Stdout, res.Error)
	}
	gdir := filepath.Join(preinitDir(dir), Name, base.ID())
	if n, err := b.Reconcile(context.Background()); err != nil || n != 0 {
		t.Fatalf("reconcile under the same key removed %d: %v", n, err)
	}
	if _, err := os.Stat(gdir); err != nil {
		t.Fatal(err)
	}
	if n, err := other.Reconcile(context.Background()); err != nil || n != 1 {
		t.Fatalf("reconcile under another init bound removed %d: %v", n, err)
	}
	if _, err := os.Stat(gdir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale artifact still there: %v", err)
	}
}

func TestPreinitRefusesWhatItCannotSnapshot(t *testing.T) {
	b := privateBackend(t)
	start := `(func (export "_start"))`
	for _, c := range []struct {
		name, wat, init string
		class           sandbox.Class
		msg             string
	}{
		{"missing export", `(module ` + start + `)`, "init", sandbox.BadInput,
			`bad-input (workload.init): the module does not have a "init" export`},
		{"not a function", `(module (memory (export "init") 1) ` + start + `)`, "init", sandbox.BadInput,
			`bad-input (workload.init): the module's "init" export is not a function`},
		{"wrong type", `(module (func (export "init") (param i32)) ` + start + `)`, "init", sandbox.BadInput,
			`bad-input (workload.init): the module's "init" function export does not have type [] -> []`},
		{"init traps", `(module (func (export "init") unreachable) ` + start + `)`, "init", sandbox.BadInput,
			`bad-input (workload.init): the module's "init" export trapped: wasm trap: wasm ` + "`unreachable`" + ` instruction executed`},
		{"init exits", `(module (import "wasi_snapshot_preview1" "proc_exit" (func $x (param i32))) (memory (export "memory") 1)
			(func (export "init") (call $x (i32.const 3))) ` + start + `)`, "init", sandbox.BadInput,
			`bad-input (workload.init): the module's "init" export exited with status 3`},
		{"imported global", `(module (import "env" "g" (global i32)) (func (export "wizer.initialize")) ` + start + `)`, "", sandbox.BadInput,
			`bad-input (workload.init): the module cannot be pre-initialised: it imports env.g, which is not a function`},
		{"passive data", `(module (memory 1) (data "x") (func (export "wizer.initialize")) ` + start + `)`, "", sandbox.BadInput,
			`bad-input (workload.init): the module cannot be pre-initialised: passive data segments`},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := inv(mustWat(t, c.wat), "m")
			in.Workload.Init = c.init
			sb, _ := b.Prepare(context.Background(), sandbox.Template{Kind: sandbox.KindWasm})
			_, err := sb.Run(context.Background(), in)
			if !errors.Is(err, c.class) || !strings.HasPrefix(err.Error(), c.msg) {
				t.Fatalf("err %v, want %q…", err, c.msg)
			}
		})
	}
	if n := b.pre.built.Load(); n != 0 {
		t.Fatalf("built %d artifacts from refused modules", n)
	}
}

func TestPreinitInitBoundIsTimeout(t *testing.T) {
	b := privateBackend(t, func(c *Config) { c.InitWall = 50e6 })
	in := inv(mustWat(t, `(module (func (export "wizer.initialize") (loop $l (br $l))) (func (export "_start")))`), "spin")
	sb, _ := b.Prepare(context.Background(), sandbox.Template{Kind: sandbox.KindWasm})
	_, err := sb.Run(context.Background(), in)
	if want := `timeout (workload.init): the module's "wizer.initialize" export ran longer than the 50ms pre-initialisation bound`; err == nil || err.Error() != want {
		t.Fatalf("err %v, want %s", err, want)
	}
}

func TestWorkloadInitOnlyForWasm(t *testing.T) {
	for _, w := range []sandbox.Workload{
		{Kind: sandbox.KindCommand, Argv: []string{"/bin/true"}, Init: "init"},
		{Kind: sandbox.KindComponent, Module: []byte("\x00asm"), Init: "init"},
		{Kind: sandbox.KindWasm, Module: []byte("\x00asm"), Init: strings.Repeat("x", sandbox.MaxInitBytes+1)},
	} {
		in := &sandbox.Invocation{Tenant: "t1", Workload: w, Policy: sandbox.Policy{Trust: sandbox.Internal}}
		var se *sandbox.Error
		if err := in.Validate(); !errors.As(err, &se) || se.Class != sandbox.BadInput || se.Field != "workload.init" {
			t.Fatalf("%s workload with init %.10q: %v", w.Kind, w.Init, err)
		}
	}
}

func TestSegmentsMergeGapsOfFourBytes(t *testing.T) {
	mem := make([]byte, 64)
	copy(mem[2:], "ab")        // 2..4
	copy(mem[8:], "cd")        // gap 4: merged into 2..10
	copy(mem[15:], "ef")       // gap 5: its own
	copy(mem[62:], "\x01\x02") // up to the end
	var got []string
	for _, s := range segmentsOf(1, mem) {
		got = append(got, fmt.Sprintf("%d@%d:%q", s.memory, s.offset, s.data))
	}
	if want := `1@2:"ab\x00\x00\x00\x00cd" 1@15:"ef" 1@62:"\x01\x02"`; strings.Join(got, " ") != want {
		t.Fatalf("got %s", strings.Join(got, " "))
	}
	if segs := segmentsOf(0, make([]byte, 32)); len(segs) != 0 {
		t.Fatalf("zero memory gave %d segments", len(segs))
	}
}

func TestSegmentsBeyondTheBoundMergeSmallestGaps(t *testing.T) {
	mem := make([]byte, 20*(maxSegments+2))
	for i := range maxSegments + 2 {
		at := 20 * i
		if i == 7 || i == 9 {
			at -= 10 // two gaps of 9 bytes, the smallest
		}
		mem[at] = 1
	}
	segs := limitSegments(segmentsOf(0, mem), [][]byte{mem})
	if len(segs) != maxSegments {
		t.Fatalf("%d segments, want %d", len(segs), maxSegments)
	}
	if s := segs[6]; s.offset != 120 || !bytes.Equal(s.data, mem[120:131]) {
		t.Fatalf("segment 6 at %d len %d, want 120 len 11", s.offset, len(s.data))
	}
	if s := segs[7]; s.offset != 160 || len(s.data) != 11 {
		t.Fatalf("segment 7 at %d len %d, want 160 len 11", s.offset, len(s.data))
	}
}

// heavyWAT is a module whose init runs a loop of N steps (FNV-style mixing)
// and fills a 64 KiB table with its results; _start initialises lazily and
// prints the final hash in hex.
const heavyWAT = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 0) "0123456789abcdef")
  (global $ready (mut i32) (i32.const 0))
  (global $acc (mut i32) (i32.const 0))
  (func $init (export "wizer.initialize")
    (local $i i32) (local $x i32)
    (local.set $x (i32.const 0x811c9dc5))
    (loop $l
      (local.set $x (i32.mul (i32.xor (local.get $x) (local.get $i)) (i32.const 16777619)))
      (i32.store8 (i32.add (i32.const 1024) (i32.and (local.get $i) (i32.const 0xffff))) (i32.or (local.get $x) (i32.const 1)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const %d))))
    (global.set $acc (local.get $x))
    (global.set $ready (i32.const 1)))
  (func (export "_start")
    (local $k i32)
    (if (i32.eqz (global.get $ready)) (then (call $init)))
    (loop $h
      (i32.store8 (i32.add (i32.const 64) (local.get $k))
        (i32.load8_u (i32.and (i32.shr_u (global.get $acc) (i32.sub (i32.const 28) (i32.shl (local.get $k) (i32.const 2)))) (i32.const 15))))
      (local.set $k (i32.add (local.get $k) (i32.const 1)))
      (br_if $h (i32.lt_u (local.get $k) (i32.const 8))))
    (i32.store8 (i32.const 72) (i32.const 10))
    (i32.store (i32.const 80) (i32.const 64))
    (i32.store (i32.const 84) (i32.const 9))
    (drop (call $fd_write (i32.const 1) (i32.const 80) (i32.const 1) (i32.const 88)))))`

func heavyModule(t testing.TB, steps int) []byte { return mustWat(t, fmt.Sprintf(heavyWAT, steps)) }

func TestPreinitHeavyInitAnswersTheSame(t *testing.T) {
	b := privateBackend(t)
	mod := heavyModule(t, 100_000)
	lazy := run(t, b, inv(mustWat(t, strings.Replace(fmt.Sprintf(heavyWAT, 100_000), `(export "wizer.initialize")`, "", 1)), "m"))
	pre := run(t, b, inv(mod, "m"))
	if lazy.Class != sandbox.OK || len(lazy.Stdout) != 9 || string(pre.Stdout) != string(lazy.Stdout) {
		t.Fatalf("lazily initialised %q (%s), pre-initialised %q (%s)", lazy.Stdout, lazy.Error, pre.Stdout, pre.Error)
	}
}

// TestPreinitSecondMemory: a segment of memory 1 is encoded with its index
// (the backend's pool admits one memory per instance, so this checks the
// transformation alone).
func TestPreinitSecondMemory(t *testing.T) {
	out, err := preinitialise(context.Background(), mustWat(t, `(module (memory 1) (memory $b 1)
		(func (export "wizer.initialize") (i32.store8 $b (i32.const 5) (i32.const 33))))`), WizerInit, initBounds{wall: 10e9, memory: 1 << 24})
	if err != nil {
		t.Fatal(err)
	}
	m, err := inspectModule(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range m.sections {
		if s.id == secData {
			if got := fmt.Sprintf("%x", s.body); got != "01"+"020141050b0121" {
				t.Fatalf("data section %s", got)
			}
			return
		}
	}
	t.Fatal("no data section")
}
