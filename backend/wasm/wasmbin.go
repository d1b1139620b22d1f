package wasm

import (
	"bytes"
	"errors"
	"fmt"
)

// A small reader and writer for the parts of the WebAssembly binary format
// that pre-initialisation rewrites (preinit.go): the section list, imports,
// memories, globals, exports and data segments. Every other section — types,
// functions, tables, elements, code, custom — is carried over byte for byte,
// so function and global indices never move and debug info stays valid.

// Section ids (WebAssembly core spec, 5.5.2).
const (
	secCustom    = 0
	secImport    = 2
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secCode      = 10
	secData      = 11
	secDataCount = 12
)

// External kinds in imports and exports.
const (
	kindFunc   = 0
	kindTable  = 1
	kindMemory = 2
	kindGlobal = 3
	kindTag    = 4
)

// Value types a snapshot can hold.
const (
	valI32  = 0x7f
	valI64  = 0x7e
	valF32  = 0x7d
	valF64  = 0x7c
	valV128 = 0x7b
)

var wasmHeader = []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}

// errMalformed is a binary this reader cannot follow; the engine has already
// validated the module, so in practice it means an encoding we do not know.
var errMalformed = errors.New("malformed or unsupported module encoding")

type section struct {
	id   byte
	body []byte
}

// name is a custom section's name ("" for other sections).
func (s section) name() string {
	if s.id != secCustom {
		return ""
	}
	r := reader{b: s.body}
	n, err := r.name()
	if err != nil {
		return ""
	}
	return n
}

type reader struct {
	b   []byte
	off int
}

func (r *reader) done() bool { return r.off >= len(r.b) }

func (r *reader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errMalformed
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *reader) bytes(n uint64) ([]byte, error) {
	if n > uint64(len(r.b)-r.off) {
		return nil, errMalformed
	}
	p := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return p, nil
}

// uleb reads an unsigned LEB128 of at most bits bits.
func (r *reader) uleb(bits uint) (uint64, error) {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c, err := r.byte()
		if err != nil || shift >= bits {
			return 0, errMalformed
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
}

func (r *reader) u32() (uint32, error) {
	v, err := r.uleb(32)
	return uint32(v), err
}

// sleb skips a signed LEB128 (const immediates are copied, not evaluated).
func (r *reader) sleb(bits uint) error {
	_, err := r.uleb(bits + 7) // the same bytes; the sign is irrelevant here
	return err
}

func (r *reader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	b, err := r.bytes(uint64(n))
	return string(b), err
}

// constExpr skips a constant expression through its end opcode and returns
// its bytes, end included.
func (r *reader) constExpr() ([]byte, error) {
	start := r.off
	for {
		op, err := r.byte()
		if err != nil {
			return nil, err
		}
		switch op {
		case 0x0b: // end
			return r.b[start:r.off], nil
		case 0x41: // i32.const
			err = r.sleb(32)
		case 0x42: // i64.const
			err = r.sleb(64)
		case 0x43: // f32.const
			_, err = r.bytes(4)
		case 0x44: // f64.const
			_, err = r.bytes(8)
		case 0x23, 0xd2: // global.get, ref.func
			_, err = r.u32()
		case 0xd0: // ref.null heaptype
			err = r.sleb(33)
		case 0x6a, 0x6b, 0x6c, 0x7c, 0x7d, 0x7e: // extended-const add, sub, mul
		case 0xfd: // v128.const
			var sub uint32
			if sub, err = r.u32(); err == nil && sub != 12 {
				err = errMalformed
			}
			if err == nil {
				_, err = r.bytes(16)
			}
		default:
			return nil, fmt.Errorf("%w: constant opcode 0x%02x", errMalformed, op)
		}
		if err != nil {
			return nil, err
		}
	}
}

// parseSections splits a module into its sections.
func parseSections(wasm []byte) ([]section, error) {
	if !bytes.HasPrefix(wasm, wasmHeader) {
		return nil, fmt.Errorf("%w: not a core module (version 1)", errMalformed)
	}
	r := reader{b: wasm, off: len(wasmHeader)}
	var out []section
	for !r.done() {
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		n, err := r.u32()
		if err != nil {
			return nil, err
		}
		body, err := r.bytes(uint64(n))
		if err != nil {
			return nil, err
		}
		out = append(out, section{id: id, body: body})
	}
	return out, nil
}

type export struct {
	name  string
	kind  byte
	index uint32
}

func parseExports(body []byte) ([]export, error) {
	r := reader{b: body}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := make([]export, 0, min(n, 1<<12))
	for range n {
		var e export
		if e.name, err = r.name(); err != nil {
			return nil, err
		}
		if e.kind, err = r.byte(); err != nil {
			return nil, err
		}
		if e.index, err = r.u32(); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// memType is a memory's limits: flags bit 0 says a maximum follows.
type memType struct {
	flags    byte
	min, max uint64
}

func parseMemories(body []byte) ([]memType, error) {
	r := reader{b: body}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := make([]memType, 0, min(n, 64))
	for range n {
		var m memType
		if m.flags, err = r.byte(); err != nil {
			return nil, err
		}
		if m.flags&^1 != 0 {
			return nil, fmt.Errorf("%w: shared, 64-bit or custom-page memories (flags 0x%02x)", errUnsupported, m.flags)
		}
		if m.min, err = r.uleb(32); err != nil {
			return nil, err
		}
		if m.flags&1 != 0 {
			if m.max, err = r.uleb(32); err != nil {
				return nil, err
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// global is a defined global: its type and original initialiser.
type global struct {
	valType byte
	mutable bool
	init    []byte
}

func parseGlobals(body []byte) ([]global, error) {
	r := reader{b: body}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := make([]global, 0, min(n, 1<<12))
	for range n {
		var g global
		if g.valType, err = r.byte(); err != nil {
			return nil, err
		}
		if g.valType == 0x63 || g.valType == 0x64 { // (ref null? ht)
			return nil, fmt.Errorf("%w: typed reference globals", errUnsupported)
		}
		mut, err := r.byte()
		if err != nil {
			return nil, err
		}
		g.mutable = mut == 1
		if g.init, err = r.constExpr(); err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, nil
}

// checkImports refuses what a snapshot cannot capture, as Wizer does:
// imported memories, globals and tables (their state lives outside the
// module) and tags.
func checkImports(body []byte) error {
	r := reader{b: body}
	n, err := r.u32()
	if err != nil {
		return err
	}
	for range n {
		mod, err := r.name()
		if err != nil {
			return err
		}
		field, err := r.name()
		if err != nil {
			return err
		}
		kind, err := r.byte()
		if err != nil {
			return err
		}
		if kind != kindFunc {
			return fmt.Errorf("%w: it imports %s.%s, which is not a function (imported memories, globals and tables hold state a snapshot cannot capture)", errUnsupported, mod, field)
		}
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	return nil
}

// checkData refuses passive data segments: the snapshot replaces the data
// section with active segments, so a later memory.init would name a
// segment that is gone.
func checkData(body []byte) error {
	r := reader{b: body}
	n, err := r.u32()
	if err != nil {
		return err
	}
	for range n {
		flag, err := r.u32()
		if err != nil {
			return err
		}
		switch flag {
		case 0:
		case 2:
			if _, err := r.u32(); err != nil {
				return err
			}
		case 1:
			return fmt.Errorf("%w: passive data segments (memory.init after initialisation would lose them)", errUnsupported)
		default:
			return errMalformed
		}
		if _, err := r.constExpr(); err != nil {
			return err
		}
		size, err := r.u32()
		if err != nil {
			return err
		}
		if _, err := r.bytes(uint64(size)); err != nil {
			return err
		}
	}
	return nil
}

// writer builds a section body or a module.
type writer struct{ bytes.Buffer }

func (w *writer) uleb(v uint64) {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			c |= 0x80
		}
		w.WriteByte(c)
		if v == 0 {
			return
		}
	}
}

func (w *writer) sleb(v int64) {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			w.WriteByte(c)
			return
		}
		w.WriteByte(c | 0x80)
	}
}

func (w *writer) name(s string) {
	w.uleb(uint64(len(s)))
	w.WriteString(s)
}

// section appends one section with its id and size.
func (w *writer) section(id byte, body []byte) {
	w.WriteByte(id)
	w.uleb(uint64(len(body)))
	w.Write(body)
}

func encodeExports(es []export) []byte {
	var w writer
	w.uleb(uint64(len(es)))
	for _, e := range es {
		w.name(e.name)
		w.WriteByte(e.kind)
		w.uleb(uint64(e.index))
	}
	return w.Bytes()
}

func encodeMemories(ms []memType) []byte {
	var w writer
	w.uleb(uint64(len(ms)))
	for _, m := range ms {
		w.WriteByte(m.flags)
		w.uleb(m.min)
		if m.flags&1 != 0 {
			w.uleb(m.max)
		}
	}
	return w.Bytes()
}

func encodeGlobals(gs []global) []byte {
	var w writer
	w.uleb(uint64(len(gs)))
	for _, g := range gs {
		w.WriteByte(g.valType)
		if g.mutable {
			w.WriteByte(1)
		} else {
			w.WriteByte(0)
		}
		w.Write(g.init)
	}
	return w.Bytes()
}
