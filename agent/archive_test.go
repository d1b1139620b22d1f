package agent

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/wovyr/wovyr/sandbox"
)

// tree lists dir as "path type mode [content|target]" lines, sorted.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		line := rel + " " + fi.Mode().String()
		switch {
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			line += " " + string(b)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			line += " -> " + target
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestArchiveRoundTrip: a tree archived and extracted elsewhere comes back
// with its files, directories, modes and symlinks (as links); a FIFO is
// left out; the archive of a subdirectory is relative to it.
func TestArchiveRoundTrip(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(src, "pkg", "lib"), 0o750)
	os.WriteFile(filepath.Join(src, "main.py"), []byte("print(1)\n"), 0o644)
	os.WriteFile(filepath.Join(src, "pkg", "run.sh"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(src, "pkg", "lib", "empty"), nil, 0o600)
	os.Symlink("../main.py", filepath.Join(src, "pkg", "main"))
	os.Symlink("/etc/passwd", filepath.Join(src, "abs"))
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	fr, err := FileOp(src, &sandbox.FileOp{Op: sandbox.FileArchive})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := FileOp(dst, &sandbox.FileOp{Op: sandbox.FileExtract, Path: "copy", Data: fr.Data}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"abs Lrwxrwxrwx -> /etc/passwd",
		"main.py -rw-r--r-- print(1)\n",
		"pkg drwxr-x---",
		"pkg/lib drwxr-x---",
		"pkg/lib/empty -rw------- ",
		"pkg/main Lrwxrwxrwx -> ../main.py",
		"pkg/run.sh -rwxr-xr-x #!/bin/sh\n",
	}
	if got := tree(t, filepath.Join(dst, "copy")); !slices.Equal(got, want) {
		t.Fatalf("extracted tree:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	sub, err := FileOp(src, &sandbox.FileOp{Op: sandbox.FileArchive, Path: "pkg/lib"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := tar.NewReader(bytes.NewReader(sub.Data)).Next()
	if err != nil || h.Name != "empty" {
		t.Fatalf("first entry of pkg/lib's archive: %+v, %v; want empty", h, err)
	}
}

// TestArchiveBounded: a tree over the bound is an error, not a cut
// archive; a file is not a directory to archive.
func TestArchiveBounded(t *testing.T) {
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "big"), make([]byte, 8192), 0o644)
	_, err := FileOp(src, &sandbox.FileOp{Op: sandbox.FileArchive, Max: 4096})
	if err == nil || err.Error() != ". makes an archive over the 4096-byte limit" {
		t.Fatalf("archive over the bound: %v", err)
	}
	_, err = FileOp(src, &sandbox.FileOp{Op: sandbox.FileArchive, Path: "big"})
	if err == nil || err.Error() != "big is not a directory" {
		t.Fatalf("archive of a file: %v", err)
	}
}

// tarOf builds an archive of hs, each regular one with body "x".
func tarOf(t *testing.T, hs ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hs {
		if h.Typeflag == tar.TypeReg {
			h.Size = 1
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte("x"))
		}
	}
	tw.Close()
	return buf.Bytes()
}

// TestExtractRefusesWhole: an archive with one entry that cannot be
// extracted in place is refused before anything is written — its good
// entries too — and nothing outside the workspace is touched.
func TestExtractRefusesWhole(t *testing.T) {
	reg := func(name string) tar.Header { return tar.Header{Name: name, Typeflag: tar.TypeReg} }
	good := reg("good.txt")
	for _, tc := range []struct {
		name string
		bad  []tar.Header
		want string
	}{
		{"dotdot", []tar.Header{reg("../escape")}, `archive entry "../escape": `},
		{"absolute", []tar.Header{reg("/etc/escape")}, `archive entry "/etc/escape": `},
		{"hard link", []tar.Header{{Name: "hard", Typeflag: tar.TypeLink, Linkname: "good.txt"}}, `archive entry "hard": type '1' is not a file, a directory or a symlink`},
		{"device", []tar.Header{{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}}, `archive entry "null": type '3' is not a file, a directory or a symlink`},
		{"fifo", []tar.Header{{Name: "p", Typeflag: tar.TypeFifo}}, `archive entry "p": type '6' is not a file, a directory or a symlink`},
		{"under its own symlink", []tar.Header{{Name: "out", Typeflag: tar.TypeSymlink, Linkname: "/"}, reg("out/etc/escape")},
			`archive entry "out/etc/escape" lies under the archive's symlink "out"`},
		{"under the workspace's symlink", []tar.Header{reg("hostlink/escape")}, `archive entry "hostlink/escape" lies under hostlink, which is not a directory`},
		{"under a file", []tar.Header{reg("file/x")}, `archive entry "file/x" lies under file, which is not a directory`},
		{"over a directory", []tar.Header{reg("dir")}, `archive entry "dir" would replace the directory dir`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			ws, outside := filepath.Join(base, "ws"), filepath.Join(base, "outside")
			os.MkdirAll(filepath.Join(ws, "dir"), 0o755)
			os.Mkdir(outside, 0o755)
			os.WriteFile(filepath.Join(ws, "file"), []byte("f"), 0o644)
			os.Symlink(outside, filepath.Join(ws, "hostlink"))
			before := tree(t, ws)
			data := tarOf(t, append([]tar.Header{good}, tc.bad...)...)
			_, err := FileOp(ws, &sandbox.FileOp{Op: sandbox.FileExtract, Data: data})
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("extract: %v, want an error starting %q", err, tc.want)
			}
			if after := tree(t, ws); !slices.Equal(after, before) {
				t.Fatalf("the workspace changed:\n%s\nwas:\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Fatalf("written outside the workspace: %v", ents)
			}
			if _, err := os.Stat(filepath.Join(base, "escape")); err == nil {
				t.Fatal("../escape was written")
			}
		})
	}
	_, err := FileOp(t.TempDir(), &sandbox.FileOp{Op: sandbox.FileExtract, Data: []byte("not a tar archive at all, but long enough to be read as a header block? no")})
	if err == nil || !strings.HasPrefix(err.Error(), "not a tar archive: ") {
		t.Fatalf("extract of garbage: %v", err)
	}
}
