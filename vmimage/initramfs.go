package vmimage

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// GuestModules are the modules a wovyr guest loads, by name, in no
// particular order (dependencies are resolved from modules.dep). The Debian
// kernel builds all of them as modules; crc32c_generic is ext4's soft
// dependency (ext4 allocates a crc32c driver at every mount, checksums or
// not), which modules.dep does not list.
var GuestModules = []string{
	"virtio_mmio", "virtio_blk", "virtio_console", "crc32c_generic", "ext4", "overlay",
}

// InitramfsOptions says what goes into the initramfs.
type InitramfsOptions struct {
	Guest      string   // the static wovyr-guest binary; becomes /init
	Busybox    string   // a static busybox; becomes /bin/busybox (empty: none)
	ModulesDir string   // /lib/modules/<release>
	Modules    []string // module names; nil means GuestModules
}

// WriteInitramfs writes an uncompressed newc initramfs to dst. Uncompressed
// because the guest would spend more time decompressing it under TCG than
// QEMU spends copying it.
func WriteInitramfs(dst string, o InitramfsOptions) error {
	guest, err := os.ReadFile(o.Guest)
	if err != nil {
		return fmt.Errorf("vmimage: guest agent: %w", err)
	}
	if !isStaticELF(guest) {
		return fmt.Errorf("vmimage: guest agent %s is not a static ELF (build it with CGO_ENABLED=0)", o.Guest)
	}
	mods := o.Modules
	if mods == nil {
		mods = GuestModules
	}
	order, err := ResolveModules(o.ModulesDir, mods)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	c := &cpioWriter{w: &buf}
	for _, d := range []string{"bin", "dev", "proc", "sys", "mnt", "lib", "lib/modules", "newroot", "tmp"} {
		c.Dir(d, 0o755)
	}
	c.CharDev("dev/console", 0o600, 5, 1)
	c.CharDev("dev/null", 0o666, 1, 3)
	c.File("init", 0o755, guest)
	if o.Busybox != "" {
		bb, err := os.ReadFile(o.Busybox)
		if err != nil {
			return fmt.Errorf("vmimage: busybox: %w", err)
		}
		c.File("bin/busybox", 0o755, bb)
		c.Symlink("bin/sh", "busybox")
	}
	if err := writeModules(c, o.ModulesDir, order, nil, "load.order"); err != nil {
		return err
	}
	if err := writeNetModules(c, o.ModulesDir, order); err != nil {
		return err
	}
	if err := c.Close(); err != nil {
		return fmt.Errorf("vmimage: initramfs: %w", err)
	}
	return writeFileAtomic(dst, buf.Bytes(), 0o644)
}

// writeModules adds the modules of order (files relative to modulesDir) but
// those in skip to lib/modules, signatures stripped and slimmed, and their
// load order as the file list.
func writeModules(c *cpioWriter, modulesDir string, order, skip []string, list string) error {
	var names strings.Builder
	for _, rel := range order {
		if slices.Contains(skip, rel) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(modulesDir, rel))
		if err != nil {
			return fmt.Errorf("vmimage: module: %w", err)
		}
		name := filepath.Base(rel)
		b = stripSignature(b)
		if slim, err := slimModule(b); err == nil {
			b = slim
		}
		c.File("lib/modules/"+name, 0o644, b)
		names.WriteString(name + "\n")
	}
	c.File("lib/modules/"+list, 0o644, []byte(names.String()))
	return nil
}

// ResolveModules returns the module files (relative to modulesDir) that
// names need, dependencies before their users.
func ResolveModules(modulesDir string, names []string) ([]string, error) {
	f, err := os.Open(filepath.Join(modulesDir, "modules.dep"))
	if err != nil {
		return nil, fmt.Errorf("vmimage: %w", err)
	}
	defer f.Close()
	deps := map[string][]string{}
	byName := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		mod, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		deps[mod] = strings.Fields(rest)
		byName[moduleName(mod)] = mod
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("vmimage: modules.dep: %w", err)
	}
	var order []string
	seen := map[string]bool{}
	var visit func(string)
	visit = func(mod string) {
		if seen[mod] {
			return
		}
		seen[mod] = true
		// modules.dep lists the deepest dependency last.
		d := deps[mod]
		for i := len(d) - 1; i >= 0; i-- {
			visit(d[i])
		}
		order = append(order, mod)
	}
	for _, n := range names {
		mod, ok := byName[strings.ReplaceAll(n, "-", "_")]
		if !ok {
			return nil, fmt.Errorf("vmimage: module %s is not in %s (built in, or missing?)", n, modulesDir)
		}
		visit(mod)
	}
	return order, nil
}

func moduleName(path string) string {
	n, _, _ := strings.Cut(filepath.Base(path), ".ko")
	return strings.ReplaceAll(n, "-", "_")
}

// isStaticELF reports an ELF executable without a program interpreter: the
// initramfs has no dynamic loader.
func isStaticELF(b []byte) bool {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// sigMagic ends a signed module: module data, signature, a 12-byte
// module_signature struct whose last 4 bytes are the signature's length
// (big-endian), then this magic.
const sigMagic = "~Module signature appended~\n"

// stripSignature drops a module's appended signature. Verifying it costs
// the guest a SHA-256 and an RSA verification per module, slow under TCG,
// and buys nothing inside a wovyr guest: the kernel does not enforce
// signatures (module.sig_enforce is off in the distribution kernel), so
// guest root could load unsigned modules anyway, and the modules come from
// the host's own kernel package. The kernel marks itself tainted; that is
// all.
func stripSignature(b []byte) []byte {
	if !bytes.HasSuffix(b, []byte(sigMagic)) || len(b) < len(sigMagic)+12 {
		return b
	}
	end := len(b) - len(sigMagic)
	info := b[end-12 : end]
	sigLen := int(info[8])<<24 | int(info[9])<<16 | int(info[10])<<8 | int(info[11])
	if sigLen > end-12 {
		return b
	}
	return b[:end-12-sigLen]
}
