package vmimage

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"testing"
)

// TestSlimModule: every guest module of the installed kernel is slimmed,
// still parses as ELF, has no allocated .BTF or ORC section left under the
// names the kernel looks for, and keeps every other section as it was.
func TestSlimModule(t *testing.T) {
	_, rel, err := FindKernel("/boot", "/lib/modules")
	if err != nil {
		t.Skipf("no guest kernel on this node: %v", err)
	}
	dir := filepath.Join("/lib/modules", rel)
	order, err := ResolveModules(dir, GuestModules)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range order {
		raw, err := os.ReadFile(filepath.Join(dir, m))
		if err != nil {
			t.Fatal(err)
		}
		raw = stripSignature(raw)
		slim, err := slimModule(raw)
		if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		ef, err := elf.NewFile(bytes.NewReader(slim))
		if err != nil {
			t.Fatalf("%s: slimmed module is not ELF: %v", m, err)
		}
		orig, _ := elf.NewFile(bytes.NewReader(raw))
		hidden := 0
		for i, s := range ef.Sections {
			o := orig.Sections[i]
			switch o.Name {
			case ".BTF", ".orc_unwind", ".orc_unwind_ip":
				hidden++
				if s.Name != "~"+o.Name[1:] || s.Flags&elf.SHF_ALLOC != 0 {
					t.Errorf("%s: section %s became %s flags %v", m, o.Name, s.Name, s.Flags)
				}
			case ".rela.orc_unwind_ip":
			default:
				if s.Name != o.Name || s.Flags != o.Flags {
					t.Errorf("%s: section %s changed to %s %v", m, o.Name, s.Name, s.Flags)
				}
			}
		}
		if hidden == 0 {
			t.Errorf("%s: nothing hidden", m)
		}
	}
	if _, err := slimModule([]byte("not an ELF")); err == nil {
		t.Error("slimModule accepted garbage")
	}
}
