package oci

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/wovyr/wovyr/probecache"
)

// installBinary copies the static binary src into dir under its content
// hash (so a running sandbox's binary is never replaced underneath it) and
// returns the copy's path. A dynamically linked binary is refused: the
// sandbox's root filesystem is the tenant's template, not the host's libc.
//
// A copy is remembered by the source file's identity (probecache.Identity:
// path, size, times, inode), so a later process finds it with one stat and
// one readlink instead of reading and hashing the binary again — 64 ms for
// the 46 MB wasm runner. The identity is taken before the read: a source
// changed during the copy no longer matches what was remembered.
func installBinary(src, dir, name string) (string, error) {
	if abs, err := filepath.Abs(src); err == nil {
		src = abs
	}
	id := sha256.Sum256([]byte(probecache.Identity(src)))
	memo := filepath.Join(dir, "."+name+"-src-"+hex.EncodeToString(id[:8]))
	if dst, err := os.Readlink(memo); err == nil && filepath.Base(dst) == dst {
		if _, err := os.Stat(filepath.Join(dir, dst)); err == nil {
			return filepath.Join(dir, dst), nil
		}
	}
	dst, err := copyBinary(src, dir, name)
	if err != nil {
		return "", err
	}
	// A failed memo costs the next process a read, nothing else.
	tmp := memo + ".tmp-" + hex.EncodeToString(id[8:12])
	os.Remove(tmp)
	if os.Symlink(filepath.Base(dst), tmp) == nil && os.Rename(tmp, memo) != nil {
		os.Remove(tmp)
	}
	return dst, nil
}

// copyBinary checks src and copies it into dir under its content hash.
func copyBinary(src, dir, name string) (string, error) {
	b, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return "", fmt.Errorf("%s is not an ELF binary: %w", src, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("%s is dynamically linked; sandboxes need a static binary", src)
		}
	}
	sum := sha256.Sum256(b)
	dst := filepath.Join(dir, name+"-"+hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	tmp, err := os.CreateTemp(dir, ".install-")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Chmod(0o555); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	return dst, os.Rename(tmp.Name(), dst)
}
