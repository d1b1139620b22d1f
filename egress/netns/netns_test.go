package netns

import (
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func TestCreateDoDelete(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (CI runs as root)")
	}
	const name = "wovyr-nstest-a"
	_ = Delete(name)
	host := inode(t, "/proc/self/ns/net")
	var inside uint64
	if err := Create(name, func() error {
		inside = inode(t, "/proc/thread-self/ns/net")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	defer Delete(name)
	if inside == host || inside != inode(t, Path(name)) || inode(t, "/proc/self/ns/net") != host {
		t.Fatalf("setup ran in %d; host %d; mount %d", inside, inode(t, "/proc/self/ns/net"), inode(t, Path(name)))
	}
	var seen uint64
	if err := Do(Path(name), func() error { seen = inode(t, "/proc/thread-self/ns/net"); return nil }); err != nil {
		t.Fatal(err)
	}
	if seen != inside {
		t.Errorf("Do ran in %d, want %d", seen, inside)
	}
	if l, _ := List("wovyr-nstest-"); !slices.Equal(l, []string{name}) {
		t.Errorf("List = %v", l)
	}
	if err := Create(name, nil); err == nil {
		t.Error("creating an existing name must fail")
	}
	if err := Delete(name); err != nil {
		t.Fatal(err)
	}
	if err := Delete(name); err != nil {
		t.Errorf("Delete is idempotent: %v", err)
	}
	if l, _ := List("wovyr-nstest-"); len(l) != 0 {
		t.Errorf("after Delete: %v", l)
	}
}
