package agent

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/wovyr/wovyr/sandbox"
)

func TestFileOpRoundTrip(t *testing.T) {
	dir := t.TempDir()
	do := func(op sandbox.FileOp) *sandbox.FileReply {
		t.Helper()
		fr, err := FileOp(dir, &op)
		if err != nil {
			t.Fatalf("%s %s: %v", op.Op, op.Path, err)
		}
		return fr
	}
	do(sandbox.FileOp{Op: sandbox.FileWrite, Path: "src/main.sh", Data: []byte("echo hi\n"), Mode: 0o755})
	if got := do(sandbox.FileOp{Op: sandbox.FileRead, Path: "src/main.sh"}).Data; string(got) != "echo hi\n" {
		t.Fatalf("read %q", got)
	}
	st := do(sandbox.FileOp{Op: sandbox.FileStat, Path: "src/main.sh"}).Entries
	if len(st) != 1 || st[0].Path != "src/main.sh" || st[0].Type != "file" || st[0].Size != 8 || st[0].Mode != 0o755 {
		t.Fatalf("stat %+v", st)
	}
	if err := os.Symlink("main.sh", filepath.Join(dir, "src", "link")); err != nil {
		t.Fatal(err)
	}
	ls := do(sandbox.FileOp{Op: sandbox.FileList, Path: "src"}).Entries
	if len(ls) != 2 || ls[0].Path != "src/link" || ls[0].Type != "symlink" || ls[1].Path != "src/main.sh" {
		t.Fatalf("list %+v", ls)
	}
	if root := do(sandbox.FileOp{Op: sandbox.FileList}).Entries; len(root) != 1 || root[0].Path != "src" || root[0].Type != "dir" {
		t.Fatalf("list of the workspace %+v", root)
	}
	do(sandbox.FileOp{Op: sandbox.FileRemove, Path: "src"})
	if _, err := os.Stat(filepath.Join(dir, "src")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("src after remove: %v", err)
	}
}

// TestFileOpConfined: every way out of the workspace is refused, and the
// host file it aims at is untouched.
func TestFileOpConfined(t *testing.T) {
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	outside := filepath.Join(dir, "secret")
	if err := os.WriteFile(outside, []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "abs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..", filepath.Join(ws, "up")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		op   sandbox.FileOp
		want string
	}{
		{sandbox.FileOp{Op: sandbox.FileRead, Path: "../secret"}, "bad-input (path): path leaves the workspace"},
		{sandbox.FileOp{Op: sandbox.FileRead, Path: "/etc/passwd"}, "bad-input (path): absolute path"},
		{sandbox.FileOp{Op: sandbox.FileRead, Path: "abs"}, "openat abs: path escapes from parent"},
		{sandbox.FileOp{Op: sandbox.FileRead, Path: "up/secret"}, "openat up/secret: path escapes from parent"},
		{sandbox.FileOp{Op: sandbox.FileRead, Path: "fifo"}, "fifo is not a regular file"},
		{sandbox.FileOp{Op: sandbox.FileRead, Path: "."}, "bad-input (path): path names the workspace itself"},
		{sandbox.FileOp{Op: sandbox.FileWrite, Path: "up/secret", Data: []byte("x")}, "file up/secret: mkdirat up: statat up: path escapes from parent"},
		{sandbox.FileOp{Op: sandbox.FileStat, Path: "up/secret"}, "statat up/secret: path escapes from parent"},
		{sandbox.FileOp{Op: sandbox.FileList, Path: "up"}, "openat up: path escapes from parent"},
		{sandbox.FileOp{Op: sandbox.FileRemove, Path: "up/secret"}, "statat up/secret: path escapes from parent"},
		{sandbox.FileOp{Op: "chmod", Path: "x"}, `bad-input (op): unknown file operation "chmod"`},
		{sandbox.FileOp{Op: sandbox.FileRead, Path: "x", Data: []byte("y")}, "bad-input (data): only a write and an extract carry data"},
	}
	for _, c := range cases {
		rep := fileJob(Job{ID: "f", Dir: ws, File: &c.op})
		if rep.File != nil || rep.FileClass != sandbox.BadInput || rep.Error != c.want {
			t.Errorf("%s %q: got %+v, want bad-input %q", c.op.Op, c.op.Path, rep, c.want)
		}
	}
	rep := fileJob(Job{ID: "f", Dir: ws, File: &sandbox.FileOp{Op: sandbox.FileRead, Path: "nope"}})
	if rep.FileClass != sandbox.NotFound || rep.Error != "openat nope: no such file or directory" {
		t.Errorf("missing file: %+v", rep)
	}
	if b, _ := os.ReadFile(outside); string(b) != "host" {
		t.Errorf("the file outside the workspace now holds %q", b)
	}
}

func TestFileOpReadLimit(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, 10), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := FileOp(dir, &sandbox.FileOp{Op: sandbox.FileRead, Path: "big", Max: 9})
	if err == nil || err.Error() != "big is 10 bytes, over the 9-byte limit" {
		t.Fatalf("got %v", err)
	}
}

// TestSweepRefusedOutsideInit pins the guard: kill(-1) from anything but
// a namespace's init would signal the whole host.
func TestSweepRefusedOutsideInit(t *testing.T) {
	if err := sweep(); err == nil || err.Error() != "sweep: the agent is not its pid namespace's init" {
		t.Fatalf("got %v", err)
	}
}
