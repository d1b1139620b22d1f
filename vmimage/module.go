package vmimage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
)

// Loading a module under TCG is slow mostly for work a throw-away guest
// does not need, so the image builder prepares each module once:
//
//   - the appended signature goes (stripSignature);
//   - the .BTF section is hidden: the kernel would parse and validate every
//     type in it at load time, for BPF tooling no guest runs;
//   - the ORC unwind tables (.orc_unwind, .orc_unwind_ip) are hidden and
//     no longer allocated: the kernel would relocate every entry (as many
//     relocations as the module's code has) and sort the table. Without
//     them the guest kernel's stack traces through module code are
//     best-effort (the unwinder falls back to frame guessing), which only
//     oops reports and livepatch care about.
//
// The guest init also loads with MODULE_INIT_IGNORE_MODVERSIONS, since the
// modules and the kernel come from one package. The guest kernel is
// tainted (unsigned, forced module); wovyr guests are thrown away.

// hiddenSections are the section names slimModule hides from the kernel.
var hiddenSections = []string{".BTF", ".orc_unwind", ".orc_unwind_ip"}

// errNotSlimmable means a module's layout was not what slimModule expects;
// the builder then keeps the module as it is.
var errNotSlimmable = errors.New("vmimage: module layout not recognised")

const shfAlloc = 0x2

// slimModule returns a copy of the ELF64 little-endian relocatable module m
// with hiddenSections renamed (their leading '.' becomes '~', so the kernel,
// which finds them by name, does not) and not allocated (so their
// relocation sections are skipped). Section names may share bytes in the
// section-name table; the rename is refused unless it changes only the
// hidden sections and relocation sections for them.
func slimModule(m []byte) ([]byte, error) {
	if len(m) < 64 || !bytes.HasPrefix(m, []byte("\x7fELF\x02\x01")) || binary.LittleEndian.Uint16(m[16:]) != 1 {
		return nil, errNotSlimmable
	}
	out := slices.Clone(m)
	le := binary.LittleEndian
	shoff, shentsize := le.Uint64(out[0x28:]), uint64(le.Uint16(out[0x3a:]))
	shnum, shstrndx := uint64(le.Uint16(out[0x3c:])), uint64(le.Uint16(out[0x3e:]))
	if shentsize != 64 || shstrndx >= shnum || shoff+shnum*64 > uint64(len(out)) {
		return nil, errNotSlimmable
	}
	sh := func(i uint64) []byte { return out[shoff+i*64 : shoff+(i+1)*64] }
	strOff, strSize := le.Uint64(sh(shstrndx)[24:]), le.Uint64(sh(shstrndx)[32:])
	if strOff+strSize > uint64(len(out)) {
		return nil, errNotSlimmable
	}
	strtab := out[strOff : strOff+strSize]
	names := func() []string {
		n := make([]string, shnum)
		for i := range shnum {
			off := uint64(le.Uint32(sh(i)))
			if off < uint64(len(strtab)) {
				s := strtab[off:]
				if end := bytes.IndexByte(s, 0); end >= 0 {
					n[i] = string(s[:end])
				}
			}
		}
		return n
	}
	before := names()
	hidden := map[uint64]bool{}
	for i, n := range before {
		if slices.Contains(hiddenSections, n) {
			hidden[uint64(i)] = true
			strtab[le.Uint32(sh(uint64(i)))] = '~'
			flags := le.Uint64(sh(uint64(i))[8:])
			le.PutUint64(sh(uint64(i))[8:], flags&^shfAlloc)
		}
	}
	if len(hidden) == 0 {
		return m, nil
	}
	after := names()
	for i := range shnum {
		if before[i] == after[i] || hidden[i] {
			continue
		}
		const shtRela = 4
		if le.Uint32(sh(i)[4:]) == shtRela && hidden[uint64(le.Uint32(sh(i)[44:]))] {
			continue // .rela.orc_unwind_ip shares its name's tail: it names no section the kernel looks up
		}
		return nil, errNotSlimmable
	}
	return out, nil
}
