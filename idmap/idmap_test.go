package idmap

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestMountShiftsOwners(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("idmap tests need root (CI runs as root)")
	}
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	for _, d := range []string{src, dst} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(src, "f"), 7, 8); err != nil {
		t.Fatal(err)
	}
	r := Range{HostUID: 300000, HostGID: 400000, Size: 65536}
	ns, err := Userns(r)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if err := Mount(src, dst, ns, ReadOnly|NoSuid|NoDev); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dst, unix.MNT_DETACH)
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dst, "f"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 300007 || st.Gid != 400008 {
		t.Fatalf("owner in idmapped view = %d:%d, want 300007:400008", st.Uid, st.Gid)
	}
	if err := os.WriteFile(filepath.Join(dst, "g"), nil, 0o644); err == nil {
		t.Fatal("write to the read-only idmapped view succeeded")
	}
}

func TestRangeRejectsRoot(t *testing.T) {
	for _, r := range []Range{{0, 1, 10}, {1, 0, 10}, {1, 1, 0}, {1<<32 - 10, 1, 100}} {
		if r.Valid() {
			t.Errorf("%+v: valid, want invalid", r)
		}
		if _, err := Userns(r); err == nil {
			t.Errorf("%+v: Userns succeeded", r)
		}
	}
}
