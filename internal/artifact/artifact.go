// Package artifact reads and writes sealed compiled-code files: a
// serialized Wasmtime module or component, framed with its cache key and a
// checksum.
//
// # Why seal them
//
// A serialized artifact is machine code that will run in this process;
// Wasmtime checks its header but not its code. A file is therefore trusted
// only if its key (what it was compiled from and for) and a SHA-256 over
// the payload match; anything else is refused and the caller recompiles.
// The format is magic "WOVYRCW1", SHA-256(key), SHA-256(payload), payload.
package artifact

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
)

var magic = []byte("WOVYRCW1")

const headerLen = 8 + 32 + 32

// Read returns the payload of the sealed file at path if it was written
// for key and is intact. A missing file is an fs.ErrNotExist error.
func Read(path, key string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < headerLen || !bytes.Equal(b[:8], magic) {
		return nil, errors.New("not a wovyr artifact")
	}
	kh := sha256.Sum256([]byte(key))
	if !bytes.Equal(b[8:40], kh[:]) {
		return nil, errors.New("artifact key mismatch")
	}
	ph := sha256.Sum256(b[headerLen:])
	if !bytes.Equal(b[40:72], ph[:]) {
		return nil, errors.New("artifact checksum mismatch (corrupt)")
	}
	return b[headerLen:], nil
}

// Write seals payload for key into path, atomically (a temporary file in
// the same directory, renamed), mode 0600.
func Write(path, key string, payload []byte) error {
	kh := sha256.Sum256([]byte(key))
	ph := sha256.Sum256(payload)
	f, err := os.CreateTemp(filepath.Dir(path), ".wovyr-tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	for _, p := range [][]byte{magic, kh[:], ph[:], payload} {
		if _, err := f.Write(p); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path) // CreateTemp made it 0600
}
