// Package artifact reads and writes sealed compiled-code files: a
// serialized Wasmtime module or component, framed with its cache key and a
// checksum.
//
// # Why seal them
//
// A serialized artifact is machine code that will run in this process;
// Wasmtime checks its header but not its code. A file is therefore trusted
// only if its key (what it was compiled from and for) and a digest over
// the payload match; anything else is refused and the caller recompiles.
// The format is magic "WOVYRCW3", BLAKE3(key), the payload's digest,
// payload. The digest is BLAKE3 over the BLAKE3s of the payload's 4 MiB
// chunks, so that every core can hash a large artifact (a JavaScript
// component's is 60 MB) at once. BLAKE3 rather than SHA-256 because it
// hashes 2–3× as fast here, and a large artifact's load is mostly its
// hash and its copy (ADR 0041). Files of the earlier formats ("WOVYRCW1",
// "WOVYRCW2": SHA-256) are refused like any other, and recompiled.
package artifact

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
	"lukechampine.com/blake3"
)

var magic = []byte("WOVYRCW3")

const (
	headerLen = 8 + 32 + 32
	chunk     = 4 << 20
)

// Read returns the payload of the sealed file at path if it was written
// for key and is intact. A missing file is an fs.ErrNotExist error.
func Read(path, key string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < headerLen {
		return nil, errors.New("not a wovyr artifact")
	}
	if err := check(b[:headerLen], key, b[headerLen:]); err != nil {
		return nil, err
	}
	return b[headerLen:], nil
}

// check verifies a header against key and the payload.
func check(header []byte, key string, payload []byte) error {
	if err := checkKey(header, key); err != nil {
		return err
	}
	if d := digest(payload); !bytes.Equal(header[40:72], d[:]) {
		return errors.New("artifact checksum mismatch (corrupt)")
	}
	return nil
}

// OpenSealed is Read for a caller that maps the payload instead of
// holding a copy (Wasmtime's deserialize_file): it returns a memfd that
// holds exactly the payload, sealed so that nobody — this process
// included — can write, grow or shrink it. Each chunk is hashed from the
// very buffer that is written into the memfd, so what was checked is what
// the memfd holds; nobody else holds the memfd while it is written, and
// it is sealed before it is returned. The path to hand on is
// MemfdPath(f); close f when the mapping is made.
func OpenSealed(path, key string) (*os.File, error) {
	src, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	header := make([]byte, headerLen)
	if _, err := io.ReadFull(src, header); err != nil {
		return nil, errors.New("not a wovyr artifact")
	}
	if err := checkKey(header, key); err != nil { // before the copy
		return nil, err
	}
	fi, err := src.Stat()
	if err != nil {
		return nil, err
	}
	n := fi.Size() - headerLen
	if n <= 0 {
		return nil, errors.New("artifact checksum mismatch (empty)")
	}
	fd, err := unix.MemfdCreate("wovyr-artifact", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("artifact: memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "memfd:wovyr-artifact")
	fail := func(err error) (*os.File, error) { f.Close(); return nil, err }
	sums, err := copyHashed(f, src, n)
	if err != nil {
		return fail(err)
	}
	const seals = unix.F_SEAL_WRITE | unix.F_SEAL_GROW | unix.F_SEAL_SHRINK | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		return fail(fmt.Errorf("artifact: seal: %w", err))
	}
	if d := combine(sums); !bytes.Equal(header[40:72], d[:]) {
		return fail(errors.New("artifact checksum mismatch (corrupt)"))
	}
	return f, nil
}

// piece is how much of a chunk copyHashed moves at a time: small enough
// that the bytes it hashes are still in the core's cache when it writes
// them (a whole chunk at a time was slower by half).
const piece = 512 << 10

// copyHashed copies the n payload bytes that follow the header in src to
// dst, on every core, and returns the digest of each chunk as it was
// written. A source shorter than n is an error.
func copyHashed(dst, src *os.File, n int64) ([][32]byte, error) {
	chunks := int((n + chunk - 1) / chunk)
	sums := make([][32]byte, chunks)
	errs := make([]error, chunks)
	workers := min(chunks, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			buf := make([]byte, piece)
			h := blake3.New(32, nil)
			for c := w; c < chunks; c += workers {
				h.Reset()
				for off := int64(c) * chunk; off < min(n, int64(c+1)*chunk); off += piece {
					b := buf[:min(piece, n-off)]
					if _, err := src.ReadAt(b, headerLen+off); err != nil {
						errs[c] = fmt.Errorf("artifact: read: %w", err)
						return
					}
					h.Write(b)
					if _, err := dst.WriteAt(b, off); err != nil {
						errs[c] = fmt.Errorf("artifact: copy: %w", err)
						return
					}
				}
				h.Sum(sums[c][:0])
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if fi, err := src.Stat(); err != nil || fi.Size() != headerLen+n {
		return nil, errors.New("artifact: the file changed size while it was read")
	}
	return sums, nil
}

func checkKey(header []byte, key string) error {
	if !bytes.Equal(header[:8], magic) {
		return errors.New("not a wovyr artifact (or one of an older format)")
	}
	kh := blake3.Sum256([]byte(key))
	if !bytes.Equal(header[8:40], kh[:]) {
		return errors.New("artifact key mismatch")
	}
	return nil
}

// MemfdPath names f for a consumer that opens by path.
func MemfdPath(f *os.File) string { return fmt.Sprintf("/proc/self/fd/%d", f.Fd()) }

// tempPattern names Write's temporary files.
const tempPattern = ".wovyr-tmp-*"

// RemoveStale removes from dir the temporary files of Writes that a crash
// cut short (a JavaScript component's is 60 MB). Call it at start-up,
// before anything writes to dir; it returns how many it removed.
func RemoveStale(dir string) (int, error) {
	m, err := filepath.Glob(filepath.Join(dir, tempPattern))
	if err != nil {
		return 0, err
	}
	var errs []error
	n := 0
	for _, p := range m {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// Write seals payload for key into path, atomically (a temporary file in
// the same directory, renamed), mode 0600.
func Write(path, key string, payload []byte) error {
	kh := blake3.Sum256([]byte(key))
	ph := digest(payload)
	f, err := os.CreateTemp(filepath.Dir(path), tempPattern)
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

// digest is BLAKE3 over the BLAKE3 of each chunk of b, the chunks hashed
// on every core.
func digest(b []byte) [32]byte {
	n := (len(b) + chunk - 1) / chunk
	sums := make([][32]byte, n)
	workers := min(n, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for c := w; c < n; c += workers {
				sums[c] = blake3.Sum256(b[c*chunk : min(len(b), (c+1)*chunk)])
			}
		})
	}
	wg.Wait()
	return combine(sums)
}

// combine is the payload digest of its chunks' digests.
func combine(sums [][32]byte) [32]byte {
	h := blake3.New(32, nil)
	for _, s := range sums {
		h.Write(s[:])
	}
	return [32]byte(h.Sum(nil))
}
