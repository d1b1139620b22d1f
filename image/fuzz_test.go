package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// fuzzBounds keep a fuzzed import's writes small.
var fuzzBounds = bounds{file: 1 << 20, total: 4 << 20}

// tarOf writes entries as one layer's tar.
func tarOf(t testing.TB, entries ...entry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.h
		h.Size = int64(len(e.body))
		if e.size != 0 {
			h.Size = e.size
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	tw.Close() // after a declared size with no body it fails, leaving the end off
	return buf.Bytes()
}

type entry struct {
	h    tar.Header
	body string
	size int64 // the declared size, when it is not the body's
}

func reg(name, body string, mode int64) entry {
	return entry{h: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode}, body: body}
}

func link(name, target string, flag byte) entry {
	return entry{h: tar.Header{Name: name, Typeflag: flag, Linkname: target}}
}

// FuzzExtract imports two hostile layers into a template root beside a
// file outside it. Whatever the layers hold, and whether the import fails
// or not: nothing outside the root is written or linked to; inside it are
// only directories, regular files and symlinks, no setuid or setgid bit, no
// owner above 65535, no absolute symlink or relative one that leaves the
// root, and no file over the bounds. A refusal is ErrRejected or the
// filesystem's own *fs.PathError or *os.LinkError.
func FuzzExtract(f *testing.F) {
	dir := func(name string) entry { return entry{h: tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755}} }
	for _, seed := range [][2][]byte{
		{nil, nil},
		{[]byte("not a tar"), nil},
		{tarOf(f, reg("../../escape", "pwned", 0o644)), nil},
		{tarOf(f, reg("/abs/../../escape", "pwned", 0o644)), nil},
		{tarOf(f, reg("a/../../../outside/secret", "pwned", 0o644)), nil},
		{tarOf(f, link("etc/shadow", "/etc/shadow", tar.TypeSymlink), reg("etc/shadow", "x", 0o644)), nil},
		{tarOf(f, link("up", "../../..", tar.TypeSymlink), reg("up/outside/secret", "pwned", 0o644)), nil},
		{tarOf(f, link("root", "/", tar.TypeSymlink), reg("root/x", "in", 0o644)), nil},
		{tarOf(f, link("loop", "loop", tar.TypeSymlink), reg("loop/x", "x", 0o644)), nil},
		{tarOf(f, link("a", "b", tar.TypeSymlink), link("b", "a", tar.TypeSymlink), reg("a/x", "x", 0o644)), nil},
		{tarOf(f, link("hard", "../../outside/secret", tar.TypeLink)), nil},
		{tarOf(f, link("hard", "/etc/passwd", tar.TypeLink)), nil},
		{tarOf(f, link("sl", "/etc", tar.TypeSymlink), link("hard", "sl/passwd", tar.TypeLink)), nil},
		{tarOf(f, entry{h: tar.Header{Name: "dev/mem", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 1, Mode: 0o666}},
			entry{h: tar.Header{Name: "dev/sda", Typeflag: tar.TypeBlock, Devmajor: 8, Mode: 0o666}},
			entry{h: tar.Header{Name: "fifo", Typeflag: tar.TypeFifo, Mode: 0o666}}), nil},
		{tarOf(f, reg("suid", "x", 0o4755), reg("sgid", "x", 0o2755), reg("sticky", "x", 0o1777),
			entry{h: tar.Header{Name: "uid", Typeflag: tar.TypeReg, Uid: 1 << 30, Gid: -5}, body: "u"}), nil},
		{tarOf(f, entry{h: tar.Header{Name: "huge", Typeflag: tar.TypeReg, Mode: 0o644}, size: 1 << 40}), nil},
		{tarOf(f, entry{h: tar.Header{Name: "torn", Typeflag: tar.TypeReg, Mode: 0o644}, body: "short", size: 100}), nil},
		{tarOf(f, entry{h: tar.Header{Name: "sparse", Typeflag: tar.TypeReg, Mode: 0o644,
			PAXRecords: map[string]string{"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": "sparse",
				"GNU.sparse.realsize": "1099511627776"}}, body: strings.Repeat("\x00", 512)}), nil},
		{tarOf(f, reg("dup", "one", 0o644), reg("dup", "two", 0o644), dir("dup"), reg("dup/x", "three", 0o644)), nil},
		{tarOf(f, reg("file", "x", 0o644), reg("file/under", "y", 0o644)), nil},
		{tarOf(f, dir("keep"), reg("keep/a", "a", 0o644), reg("gone", "g", 0o644), dir("opq"), reg("opq/old", "o", 0o644)),
			tarOf(f, reg(".wh.gone", "", 0o644), reg("opq/.wh..wh..opq", "", 0o644), reg("opq/new", "n", 0o644),
				reg("keep/.wh.a", "", 0o644), reg(".wh...", "", 0o644), reg(".wh.", "", 0o644))},
		{tarOf(f, reg("a", "x", 0o644)), tarOf(f, reg("../.wh.outside", "", 0o644))},
		{tarOf(f, reg("./././x", "x", 0o644), reg(strings.Repeat("d/", 200)+"deep", "x", 0o644)), nil},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, lower, upper []byte) {
		work := t.TempDir()
		root, outside := filepath.Join(work, "rootfs"), filepath.Join(work, "outside")
		secret := filepath.Join(outside, "secret")
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(outside, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(secret, []byte("s"), 0o644); err != nil {
			t.Fatal(err)
		}
		img, err := mutate.AppendLayers(empty.Image,
			static.NewLayer(lower, types.OCIUncompressedLayer), static.NewLayer(upper, types.OCIUncompressedLayer))
		if err != nil {
			t.Fatal(err)
		}
		err = extract(context.Background(), img, root, fuzzBounds)
		var pe *fs.PathError
		var le *os.LinkError
		if err != nil && !errors.Is(err, ErrRejected) && !errors.As(err, &pe) && !errors.As(err, &le) {
			t.Fatalf("extract = %v, want ErrRejected, *fs.PathError or *os.LinkError", err)
		}
		checkOutside(t, work, secret)
		checkRoot(t, root)
	})
}

// checkOutside asserts the work dir holds only rootfs and outside/secret,
// unchanged and linked only once.
func checkOutside(t *testing.T, work, secret string) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(work, "*"))
	if err != nil || len(names) != 2 {
		t.Fatalf("the work dir holds %v (%v), want rootfs and outside", names, err)
	}
	inOutside, _ := os.ReadDir(filepath.Dir(secret))
	var st syscall.Stat_t
	b, err := os.ReadFile(secret)
	if err != nil || string(b) != "s" || len(inOutside) != 1 || syscall.Lstat(secret, &st) != nil || st.Nlink != 1 {
		t.Fatalf("outside the root: secret %q (%v), %d entries, %d links", b, err, len(inOutside), st.Nlink)
	}
}

// checkRoot asserts what a template may hold.
func checkRoot(t *testing.T, root string) {
	t.Helper()
	var total int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		st := fi.Sys().(*syscall.Stat_t)
		switch m := fi.Mode(); {
		case m&(fs.ModeSetuid|fs.ModeSetgid) != 0:
			t.Errorf("%s is setuid or setgid (%v)", rel, m)
		case st.Uid > maxImportUID || st.Gid > maxImportUID:
			t.Errorf("%s is owned by %d:%d", rel, st.Uid, st.Gid)
		case m.IsRegular():
			total += fi.Size()
			if fi.Size() > fuzzBounds.file {
				t.Errorf("%s has %d bytes, over the %d-byte bound", rel, fi.Size(), fuzzBounds.file)
			}
		case m&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if resolved := path.Join(path.Dir(filepath.ToSlash(rel)), target); path.IsAbs(target) || resolved == ".." || strings.HasPrefix(resolved, "../") {
				t.Errorf("symlink %s -> %s leaves the root", rel, target)
			}
		case m.IsDir():
		default:
			t.Errorf("%s is a %v", rel, m.Type())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if total > fuzzBounds.total {
		t.Errorf("the root holds %d bytes, over the %d-byte bound", total, fuzzBounds.total)
	}
}
