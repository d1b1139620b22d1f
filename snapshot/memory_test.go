package snapshot

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// A sealed memory refuses every write and resize but still maps privately
// (what a clone's VMM does), and a saved and loaded copy keeps its content
// and its holes.
func TestSealedMemory(t *testing.T) {
	const size = 8 << 20
	m, err := NewMemory("test", size)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.WriteAt([]byte("golden"), 1<<20); err != nil {
		t.Fatal(err)
	}
	if Sealed(m) {
		t.Fatal("sealed before Seal")
	}
	if err := Seal(m); err != nil {
		t.Fatal(err)
	}
	if !Sealed(m) {
		t.Fatal("not sealed after Seal")
	}
	if _, err := m.WriteAt([]byte("tenant"), 1<<20); err == nil {
		t.Fatal("wrote into sealed memory")
	}
	if err := m.Truncate(size / 2); err == nil {
		t.Fatal("shrank sealed memory")
	}
	if _, err := unix.Mmap(int(m.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil {
		t.Fatal("mapped sealed memory shared and writable")
	}
	priv, err := unix.Mmap(int(m.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatalf("a private mapping must work: %v", err)
	}
	copy(priv[1<<20:], "tenant")
	unix.Munmap(priv)
	got := make([]byte, 6)
	m.ReadAt(got, 1<<20)
	if string(got) != "golden" {
		t.Fatalf("a private write reached the memory: %q", got)
	}

	path := filepath.Join(t.TempDir(), "ram")
	if err := SaveMemory(path, m); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 || st.Size() != size {
		t.Fatalf("saved file %v %d bytes", st.Mode(), st.Size())
	}
	var sys unix.Stat_t
	unix.Stat(path, &sys)
	if sys.Blocks*512 >= size {
		t.Errorf("saved file takes %d bytes of disk: the holes were filled", sys.Blocks*512)
	}
	l, err := LoadMemory(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !Sealed(l) {
		t.Fatal("loaded memory is not sealed")
	}
	a, b := make([]byte, size), make([]byte, size)
	m.ReadAt(a, 0)
	l.ReadAt(b, 0)
	if !bytes.Equal(a, b) {
		t.Fatal("loaded memory differs from the saved one")
	}
}
