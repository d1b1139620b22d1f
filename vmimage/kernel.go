package vmimage

import (
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// FindKernel returns the newest /boot/vmlinuz-<release> whose modules are
// installed under modulesRoot (normally /lib/modules), and that release.
func FindKernel(bootDir, modulesRoot string) (path, release string, err error) {
	matches, _ := filepath.Glob(filepath.Join(bootDir, "vmlinuz-*"))
	var releases []string
	for _, m := range matches {
		r := strings.TrimPrefix(filepath.Base(m), "vmlinuz-")
		if _, err := os.Stat(filepath.Join(modulesRoot, r, "modules.dep")); err == nil {
			releases = append(releases, r)
		}
	}
	if len(releases) == 0 {
		return "", "", fmt.Errorf("vmimage: no kernel with modules in %s and %s (install linux-image-amd64)", bootDir, modulesRoot)
	}
	slices.SortFunc(releases, compareVersions)
	r := releases[len(releases)-1]
	return filepath.Join(bootDir, "vmlinuz-"+r), r, nil
}

// compareVersions orders "6.1.0-56-amd64" numerically field by field.
func compareVersions(a, b string) int {
	split := func(s string) []string {
		return strings.FieldsFunc(s, func(r rune) bool { return r == '.' || r == '-' })
	}
	fa, fb := split(a), split(b)
	for i := 0; i < len(fa) && i < len(fb); i++ {
		na, ea := strconv.Atoi(fa[i])
		nb, eb := strconv.Atoi(fb[i])
		switch {
		case ea == nil && eb == nil && na != nb:
			return na - nb
		case (ea != nil || eb != nil) && fa[i] != fb[i]:
			return strings.Compare(fa[i], fb[i])
		}
	}
	return len(fa) - len(fb)
}

// ExtractVmlinux writes the ELF kernel inside the bzImage at src to dst.
// The payload is located through the x86 boot protocol header (setup_sects
// at 0x1f1, payload_offset/payload_length at 0x248/0x24c, protocol ≥ 2.08)
// and decompressed: gzip in-process, xz and zstd with the xz and zstd tools
// (the kernel's xz payload uses the x86 BCJ filter, which Go xz decoders
// lack).
func ExtractVmlinux(ctx context.Context, src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("vmimage: read kernel: %w", err)
	}
	payload, err := bzPayload(b)
	if err != nil {
		return fmt.Errorf("vmimage: %s: %w", src, err)
	}
	var out []byte
	switch {
	case bytes.HasPrefix(payload, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(bytes.NewReader(payload))
		if err != nil {
			return fmt.Errorf("vmimage: gzip payload: %w", err)
		}
		zr.Multistream(false)
		out, err = io.ReadAll(zr)
		if err != nil {
			return fmt.Errorf("vmimage: gzip payload: %w", err)
		}
	case bytes.HasPrefix(payload, []byte("\xfd7zXZ\x00")):
		out, err = decompressTool(ctx, payload, "xz", "-dc", "--single-stream")
	case bytes.HasPrefix(payload, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		out, err = decompressTool(ctx, payload, "zstd", "-dc")
	default:
		return fmt.Errorf("vmimage: %s: unsupported payload compression (magic % x)", src, payload[:min(6, len(payload))])
	}
	if err != nil {
		return err
	}
	// The payload is the ELF vmlinux, possibly followed by relocation data;
	// QEMU's ELF loader reads only what the headers describe.
	ef, err := elf.NewFile(bytes.NewReader(out))
	if err != nil {
		return fmt.Errorf("vmimage: decompressed payload is not an ELF kernel: %w", err)
	}
	ef.Close()
	return writeFileAtomic(dst, out, 0o644)
}

func bzPayload(b []byte) ([]byte, error) {
	if len(b) < 0x250 || string(b[0x202:0x206]) != "HdrS" {
		return nil, errors.New("not a bzImage (no HdrS boot header)")
	}
	if v := binary.LittleEndian.Uint16(b[0x206:]); v < 0x208 {
		return nil, fmt.Errorf("boot protocol %#x lacks payload fields", v)
	}
	setup := int(b[0x1f1])
	if setup == 0 {
		setup = 4
	}
	off := int64(setup+1)*512 + int64(binary.LittleEndian.Uint32(b[0x248:]))
	n := int64(binary.LittleEndian.Uint32(b[0x24c:]))
	if n == 0 || off+n > int64(len(b)) {
		return nil, fmt.Errorf("payload [%d,+%d) outside the %d-byte image", off, n, len(b))
	}
	return b[off : off+n], nil
}

func decompressTool(ctx context.Context, in []byte, tool string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Stdin = bytes.NewReader(in)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("vmimage: %s payload: %w: %s", tool, err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}

// writeFileAtomic writes to a temporary sibling and renames it into place,
// so a crashed build never leaves a half-written image that looks whole.
func writeFileAtomic(dst string, data []byte, mode os.FileMode) error {
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("vmimage: %w", err)
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fmt.Errorf("vmimage: %w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("vmimage: %w", err)
	}
	return nil
}
