package wasm

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Pre-initialisation is the Wizer transformation, in Go: run a module's init
// export once, then write what it left — every defined memory's contents
// and every defined global's value, exported or not — back into a new
// module whose data segments and global initialisers hold that state, with
// the init export and the start function removed (they have run). A fresh
// instance of the new module starts where the original stood after its
// init, without running it. This file is the module rewriting; the run that
// produces the state is preinit_run.go, the cache preinit_cache.go.
//
// # Why our own, not wizer at run time
//
// Wizer is a Rust binary with its own Wasmtime; shelling out to it per
// module would put a second runtime, of another version, on the request
// path. The transformation itself is small once the state is read, and
// doing it here keeps one engine and one version in the key. Its output
// behaves as wizer 10.0.0's does on the same module (a side-by-side test
// checks it): the same merge of non-zero memory into data segments (gaps of
// at most four bytes joined, at most 10,000 segments), the same new memory
// minimums, globals, exports and sections, in the same order.
//
// What it refuses, with errUnsupported: imported memories, globals and
// tables (as Wizer does: their state is not the module's), shared, 64-bit
// or custom-page memories, mutable v128 or reference globals, passive data
// segments (stricter than Wizer, which drops them and so breaks a later
// memory.init), and names that collide with the instrumentation's
// "__wizer_" exports.

// WizerInit is the init export a module is pre-initialised with when the
// workload names none: the Wizer convention.
const WizerInit = "wizer.initialize"

// reactorInit is a WASI reactor's initialiser: Wizer runs it before the init
// export and removes its export, and so does wovyr.
const reactorInit = "_initialize"

// errUnsupported says a module cannot be pre-initialised (BadInput).
var errUnsupported = errors.New("cannot be pre-initialised")

const (
	wasmPage = 65536
	// maxSegments bounds the data segments emitted (Wizer's bound): engines
	// limit them, so the closest ones are merged past it.
	maxSegments = 10_000
	// segmentOverhead is the least a new active segment costs in bytes
	// (memory index, i32.const, offset, length): gaps up to it are merged.
	segmentOverhead = 4
)

// moduleInfo is what the rewrite needs of a module.
type moduleInfo struct {
	sections []section
	exports  []export
	memories []memType
	globals  []global
}

// inspectModule parses wasm and refuses what a snapshot cannot capture.
func inspectModule(wasm []byte) (*moduleInfo, error) {
	secs, err := parseSections(wasm)
	if err != nil {
		return nil, err
	}
	m := &moduleInfo{sections: secs}
	for _, s := range secs {
		switch s.id {
		case secImport:
			err = checkImports(s.body)
		case secMemory:
			m.memories, err = parseMemories(s.body)
		case secGlobal:
			m.globals, err = parseGlobals(s.body)
		case secExport:
			m.exports, err = parseExports(s.body)
		case secData:
			err = checkData(s.body)
		}
		if err != nil {
			return nil, err
		}
	}
	for _, e := range m.exports {
		if strings.HasPrefix(e.name, "__wizer_") {
			return nil, fmt.Errorf("%w: it exports %q (the __wizer_ prefix is the instrumentation's)", errUnsupported, e.name)
		}
	}
	for i, g := range m.globals {
		if g.mutable && (g.valType < valF64 || g.valType > valI32) {
			return nil, fmt.Errorf("%w: mutable global %d has type 0x%02x (only i32, i64, f32 and f64 are snapshotted)", errUnsupported, i, g.valType)
		}
	}
	return m, nil
}

// export returns the export named name, if any.
func (m *moduleInfo) export(name string) (export, bool) {
	i := slices.IndexFunc(m.exports, func(e export) bool { return e.name == name })
	if i < 0 {
		return export{}, false
	}
	return m.exports[i], true
}

// initExport says which export pre-initialises the module: named, which it
// must export as a function, or (named empty) WizerInit where it exports
// one; "" means the module is not pre-initialised.
func (m *moduleInfo) initExport(named string) (string, error) {
	name := named
	if name == "" {
		name = WizerInit
	}
	e, ok := m.export(name)
	switch {
	case !ok && named == "":
		return "", nil
	case !ok:
		return "", fmt.Errorf("the module does not have a %q export", name)
	case e.kind != kindFunc:
		return "", fmt.Errorf("the module's %q export is not a function", name)
	}
	return name, nil
}

// instrumented is the module with every defined global and memory exported
// as __wizer_global_N and __wizer_memory_N, so their state can be read
// after init. Nothing else changes, so indices stay put.
func (m *moduleInfo) instrumented() []byte {
	es := slices.Clone(m.exports)
	for i := range m.globals {
		es = append(es, export{name: "__wizer_global_" + strconv.Itoa(i), kind: kindGlobal, index: uint32(i)})
	}
	for i := range m.memories {
		es = append(es, export{name: "__wizer_memory_" + strconv.Itoa(i), kind: kindMemory, index: uint32(i)})
	}
	var w writer
	w.Write(wasmHeader)
	added := false
	for _, s := range m.sections {
		switch {
		case s.id == secExport:
			w.section(secExport, encodeExports(es))
			added = true
		case !added && s.id != secCustom && sectionOrder(s.id) > sectionOrder(secExport):
			w.section(secExport, encodeExports(es))
			added = true
			w.section(s.id, s.body)
		default:
			w.section(s.id, s.body)
		}
	}
	if !added {
		w.section(secExport, encodeExports(es))
	}
	return w.Bytes()
}

// sectionOrder is a known section's place in a module (DataCount sits
// between Element and Code).
func sectionOrder(id byte) int {
	switch id {
	case secDataCount:
		return 10
	case secCode, secData:
		return int(id) + 1
	}
	return int(id)
}

// dataSegment is one active segment of the snapshot.
type dataSegment struct {
	memory uint32
	offset uint32
	data   []byte
}

// state is what init left: per defined global its new initialiser
// (immutable ones keep theirs), per memory its size in pages, and the
// non-zero memory as segments.
type state struct {
	globals  [][]byte
	memPages []uint64
	segments []dataSegment
}

// segmentsOf finds the non-zero runs of one memory and merges those closer
// than segmentOverhead, as Wizer does.
func segmentsOf(memory uint32, mem []byte) []dataSegment {
	var out []dataSegment
	for i := 0; i < len(mem); {
		for i < len(mem) && mem[i] == 0 {
			i++
		}
		if i == len(mem) {
			break
		}
		start := i
		for i < len(mem) && mem[i] != 0 {
			i++
		}
		if n := len(out); n > 0 && start-int(out[n-1].offset+uint32(len(out[n-1].data))) <= segmentOverhead {
			out[n-1].data = mem[out[n-1].offset:i]
			continue
		}
		out = append(out, dataSegment{memory: memory, offset: uint32(start), data: mem[start:i]})
	}
	return out
}

// limitSegments merges the segments with the smallest gaps (within one
// memory) until at most maxSegments remain, as Wizer does. mems holds each
// memory's bytes, which the merged segments then span.
func limitSegments(segs []dataSegment, mems [][]byte) []dataSegment {
	if len(segs) < maxSegments {
		return segs
	}
	type gap struct{ size, at int }
	var gaps []gap
	for i := 0; i+1 < len(segs); i++ {
		if segs[i].memory == segs[i+1].memory {
			gaps = append(gaps, gap{int(segs[i+1].offset) - int(segs[i].offset) - len(segs[i].data), i})
		}
	}
	// Stable by position among equal gaps, so the output is deterministic.
	slices.SortStableFunc(gaps, func(a, b gap) int { return a.size - b.size })
	gaps = gaps[:min(len(gaps), len(segs)-maxSegments)]
	join := make([]bool, len(segs))
	for _, g := range gaps {
		join[g.at] = true
	}
	var out []dataSegment
	for i := 0; i < len(segs); i++ {
		s := segs[i]
		end := int(s.offset) + len(s.data)
		for join[i] {
			i++
			end = int(segs[i].offset) + len(segs[i].data)
		}
		s.data = mems[s.memory][s.offset:end]
		out = append(out, s)
	}
	return out
}

// rewrite emits the pre-initialised module: the original's sections with
// memory minimums, globals and data from st, the init export (and a
// reactor's _initialize, when it ran) left out of the exports, the start
// section dropped and the data count updated. The data section goes where
// the original's was, else before the name section, else last — Wizer's
// order.
func (m *moduleInfo) rewrite(st *state, init string, ranReactor bool) []byte {
	var data []byte
	if len(st.segments) > 0 {
		var w writer
		w.uleb(uint64(len(st.segments)))
		for _, s := range st.segments {
			if s.memory == 0 {
				w.WriteByte(0)
			} else {
				w.WriteByte(2)
				w.uleb(uint64(s.memory))
			}
			w.WriteByte(0x41) // i32.const offset end
			w.sleb(int64(int32(s.offset)))
			w.WriteByte(0x0b)
			w.uleb(uint64(len(s.data)))
			w.Write(s.data)
		}
		data = w.Bytes()
	}
	var w writer
	w.Write(wasmHeader)
	putData := func() {
		if data != nil {
			w.section(secData, data)
			data = nil
		}
	}
	pastCode := false
	for _, s := range m.sections {
		switch s.id {
		case secCustom:
			if pastCode && s.name() == "name" {
				putData()
			}
			w.section(s.id, s.body)
		case secMemory:
			mems := slices.Clone(m.memories)
			for i := range mems {
				mems[i].min = st.memPages[i]
			}
			w.section(secMemory, encodeMemories(mems))
		case secGlobal:
			gs := slices.Clone(m.globals)
			for i := range gs {
				gs[i].init = st.globals[i]
			}
			w.section(secGlobal, encodeGlobals(gs))
		case secExport:
			es := slices.DeleteFunc(slices.Clone(m.exports), func(e export) bool {
				return e.name == init || (ranReactor && e.name == reactorInit)
			})
			w.section(secExport, encodeExports(es))
		case secStart:
			// It ran when the snapshot's instance was made.
		case secDataCount:
			var c writer
			c.uleb(uint64(len(st.segments)))
			w.section(secDataCount, c.Bytes())
		case secData:
			putData()
		default:
			if s.id == secCode {
				pastCode = true
			}
			w.section(s.id, s.body)
		}
	}
	putData()
	return w.Bytes()
}
