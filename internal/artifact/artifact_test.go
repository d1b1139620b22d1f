package artifact

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// payload spans several digest chunks and ends in a partial one.
func payload() []byte {
	b := make([]byte, 3*chunk+12345)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return b
}

func TestSealedRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.cwasm")
	want := payload()
	if err := Write(path, "k", want); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode: %v %v", fi.Mode(), err)
	}
	if got, err := Read(path, "k"); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Read: %d bytes, %v", len(got), err)
	}
	f, err := OpenSealed(path, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := io.ReadAll(f)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the memfd holds %d bytes (%v), want the %d of the payload", len(got), err, len(want))
	}
	seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	const want4 = unix.F_SEAL_WRITE | unix.F_SEAL_GROW | unix.F_SEAL_SHRINK | unix.F_SEAL_SEAL
	if err != nil || seals&want4 != want4 {
		t.Fatalf("seals %#x (%v), want %#x", seals, err, want4)
	}
	// Nobody can change it now: not through this descriptor, nor one
	// opened again by its path (as Wasmtime opens it), nor a mapping.
	if _, err := f.WriteAt([]byte("x"), 0); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("write to the sealed memfd: %v", err)
	}
	if g, err := os.OpenFile(MemfdPath(f), os.O_RDWR, 0); err == nil {
		_, werr := g.WriteAt([]byte("x"), 0)
		g.Close()
		if !errors.Is(werr, syscall.EPERM) {
			t.Fatalf("write through %s: %v", MemfdPath(f), werr)
		}
	}
	if _, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("a writable shared mapping of the sealed memfd: %v", err)
	}
}

func TestSealedRefusals(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.cwasm")
	if err := Write(path, "k", payload()); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	corrupt := append([]byte(nil), b...)
	corrupt[len(corrupt)-1] ^= 1
	v1 := append([]byte("WOVYRCW1"), b[8:]...)
	v2 := append([]byte("WOVYRCW2"), b[8:]...)
	mid := append([]byte(nil), b...)
	mid[headerLen+chunk+chunk/2] ^= 0x80 // inside the second chunk, mid-piece
	for _, c := range []struct {
		name, key string
		file      []byte
		want      string
	}{
		{"wrong key", "other", b, "artifact key mismatch"},
		{"corrupt", "k", corrupt, "artifact checksum mismatch (corrupt)"},
		{"corrupt mid-chunk", "k", mid, "artifact checksum mismatch (corrupt)"},
		{"first format", "k", v1, "not a wovyr artifact (or one of an older format)"},
		{"second format", "k", v2, "not a wovyr artifact (or one of an older format)"},
		{"short", "k", b[:20], "not a wovyr artifact"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
		os.WriteFile(p, c.file, 0o600)
		if _, err := Read(p, c.key); err == nil || err.Error() != c.want {
			t.Errorf("%s: Read: %v, want %q", c.name, err, c.want)
		}
		if f, err := OpenSealed(p, c.key); err == nil || err.Error() != c.want {
			if f != nil {
				f.Close()
			}
			t.Errorf("%s: OpenSealed: %v, want %q", c.name, err, c.want)
		}
	}
	headerOnly := filepath.Join(dir, "header-only")
	os.WriteFile(headerOnly, b[:headerLen], 0o600)
	if f, err := OpenSealed(headerOnly, "k"); err == nil || err.Error() != "artifact checksum mismatch (empty)" {
		if f != nil {
			f.Close()
		}
		t.Errorf("header only: OpenSealed: %v", err)
	}
	if _, err := OpenSealed(filepath.Join(dir, "missing"), "k"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
}

// TestRemoveStale: the temporary files of interrupted Writes go; sealed
// artifacts and other files stay.
func TestRemoveStale(t *testing.T) {
	dir := t.TempDir()
	sealed := filepath.Join(dir, "a.cwasm")
	if err := Write(sealed, "k", payload()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{".wovyr-tmp-1", ".wovyr-tmp-22", "other"} {
		os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600)
	}
	if n, err := RemoveStale(dir); n != 2 || err != nil {
		t.Fatalf("removed %d (%v), want the 2 temporary files", n, err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(left) != 2 || filepath.Base(left[0]) != "a.cwasm" || filepath.Base(left[1]) != "other" {
		t.Fatalf("left %v", left)
	}
	if _, err := Read(sealed, "k"); err != nil {
		t.Fatal(err)
	}
}
