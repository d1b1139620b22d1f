package wasm

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/sandbox"
)

// TestWorkdirPlacesTheWorkspace: the workspace is the module's read-write
// preopen at workload.workdir — the default, "/work" and "/" — with the
// invocation's files in it and collect reading from it, as `wasmtime run
// --dir HOST::GUEST` places a directory.
func TestWorkdirPlacesTheWorkspace(t *testing.T) {
	b := newBackend(t)
	g := guest(t, "goguest")
	for _, c := range []struct {
		workdir, dir, in, out string
	}{
		{"", "/workspace", "/workspace/in.txt", "/workspace/out.txt"},
		{"/work", "/work", "/work/in.txt", "/work/out.txt"},
		{"/", "/", "/in.txt", "/out.txt"},
	} {
		t.Run(strings.ReplaceAll(c.dir, "/", "_"), func(t *testing.T) {
			in := inv(g, "g", "ls", c.dir)
			in.Workload.Workdir = c.workdir
			in.Workload.Files = []sandbox.File{{Path: "in.txt", Data: []byte("given")}, {Path: "sub/deep.txt", Data: []byte("deep")}}
			if res := run(t, b, in); res.ExitCode != 0 || string(res.Stdout) != "in.txt\nsub\n" {
				t.Fatalf("ls %s: exit %d stdout %q stderr %q", c.dir, res.ExitCode, res.Stdout, res.Stderr)
			}
			in.Workload.Argv = []string{"g", "cat", c.in}
			if res := run(t, b, in); string(res.Stdout) != "given" {
				t.Fatalf("cat %s: exit %d stdout %q stderr %q", c.in, res.ExitCode, res.Stdout, res.Stderr)
			}
			in.Workload.Argv = []string{"g", "write", c.out, "made"}
			in.Workload.Collect = []string{"out.txt"}
			res := run(t, b, in)
			if res.ExitCode != 0 || len(res.Files) != 1 || res.Files[0].Path != "out.txt" || string(res.Files[0].Data) != "made" {
				t.Fatalf("write %s and collect out.txt: exit %d files %+v stderr %q", c.out, res.ExitCode, res.Files, res.Stderr)
			}
		})
	}
	if left, _ := filepath.Glob(filepath.Join(b.work, "wovyr-wasm-*")); len(left) != 0 {
		t.Fatalf("workspaces left behind: %v", left)
	}
}

// TestWorkspaceWithoutFiles: a module that can name a path finds its
// workspace, empty and writable, though the invocation passes no files —
// and bounded by limits.disk as one with files is.
func TestWorkspaceWithoutFiles(t *testing.T) {
	b := newBackend(t)
	g := guest(t, "goguest")
	in := inv(g, "g", "ls", "/workspace")
	if res := run(t, b, in); res.ExitCode != 0 || len(res.Stdout) != 0 {
		t.Fatalf("ls /workspace without files: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	in = inv(g, "g", "write", "/scratch.txt", "x")
	in.Workload.Workdir = "/"
	if res := run(t, b, in); res.ExitCode != 0 {
		t.Fatalf("write /scratch.txt with workdir /: exit %d stderr %q", res.ExitCode, res.Stderr)
	}
	in = inv(g, "g", "fill", "/workspace/big")
	in.Limits.Disk = 1 << 20
	res := run(t, b, in)
	var n int
	if _, err := fmtSscanf(string(res.Stdout), "wrote %d:", &n); err != nil || n > 1<<20 || !strings.Contains(string(res.Stdout), "No space left") {
		t.Fatalf("filling a 1 MiB workspace given no files: %q", res.Stdout)
	}

	// Control, at the WASI level: the preopen a module finds with
	// fd_prestat_get is the workspace, named by workdir.
	w := newWat()
	w.code("(call $preopens)")
	mod := mustWat(t, w.module())
	for _, dir := range []string{"/workspace", "/", "/opt/tool"} {
		in := inv(mod, "w")
		if dir != "/workspace" {
			in.Workload.Workdir = dir
		}
		if res := run(t, b, in); string(res.Stdout) != "preopen="+dir+"\ndone=0\n" {
			t.Fatalf("workdir %s: the preopens are %q", dir, res.Stdout)
		}
	}
}

// TestNamesPaths: the rule that spares a module a workspace it cannot
// see. Only imports that name a path or find or list a preopen count.
func TestNamesPaths(t *testing.T) {
	for _, c := range []struct {
		imports []wasmcapi.Import
		want    bool
	}{
		{nil, false},
		{[]wasmcapi.Import{{Module: "wasi_snapshot_preview1", Name: "fd_write"}, {Module: "wasi_snapshot_preview1", Name: "proc_exit"}, {Module: "wasi_snapshot_preview1", Name: "random_get"}}, false},
		{[]wasmcapi.Import{{Module: "wasi_snapshot_preview1", Name: "fd_write"}, {Module: "wasi_snapshot_preview1", Name: "path_open"}}, true},
		{[]wasmcapi.Import{{Module: "wasi_snapshot_preview1", Name: "fd_prestat_get"}}, true},
		{[]wasmcapi.Import{{Module: "wasi_snapshot_preview1", Name: "fd_readdir"}}, true},
		{[]wasmcapi.Import{{Module: "wasi_unstable", Name: "path_filestat_get"}}, true},
		{[]wasmcapi.Import{{Module: "env", Name: "path_open"}}, false}, // not WASI: it cannot link
	} {
		if got := namesPaths(c.imports); got != c.want {
			t.Errorf("namesPaths(%v) = %v, want %v", c.imports, got, c.want)
		}
	}
	// The imports are read from the compiled module.
	b := newBackend(t)
	if err := b.started(); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"wat/tiny": false, "goguest": true, "c/hello": false} {
		e, err := b.modules.acquire(guest(t, name))
		if err != nil {
			t.Fatal(err)
		}
		if e.namesPaths != want {
			t.Errorf("%s: namesPaths %v, want %v", name, e.namesPaths, want)
		}
		b.modules.release(e)
	}
}

// TestBadWorkdir: a workdir that is not an absolute clean path, one on a
// command or component, or the guest path of an operator's read-only
// preopen is bad-input naming workload.workdir, and nothing runs.
func TestBadWorkdir(t *testing.T) {
	ro := t.TempDir()
	b := newBackend(t, func(c *Config) { c.Preopens = []Preopen{{Host: ro, Guest: "/data"}} })
	g := guest(t, "goguest")
	for _, dir := range []string{"work", "/work/", "/work/../etc", "/a//b", "/./x", "/x\x00", "/" + strings.Repeat("a", sandbox.MaxPathBytes)} {
		in := inv(g, "g", "hello")
		in.Workload.Workdir = dir
		if err := in.Validate(); !isBadWorkdir(err) {
			t.Errorf("workdir %q: %v", dir, err)
		}
	}
	in := inv(g, "g", "hello")
	in.Workload.Workdir = "/data"
	if err := b.CheckWorkload(&in.Workload); !isBadWorkdir(err) {
		t.Errorf("workdir over an operator's preopen: %v", err)
	}
	sb, err := b.Prepare(context.Background(), sandbox.Template{Kind: sandbox.KindWasm})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	if _, err := sb.Run(context.Background(), in); !isBadWorkdir(err) {
		t.Errorf("run with workdir over an operator's preopen: %v", err)
	}
	cmd := &sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/true"}, Workdir: "/work"}
	if err := (&sandbox.Invocation{Tenant: "t1", Workload: *cmd, Policy: sandbox.Policy{Trust: sandbox.Trusted}}).Validate(); !isBadWorkdir(err) {
		t.Errorf("workdir on a command: %v", err)
	}
}

func isBadWorkdir(err error) bool {
	var se *sandbox.Error
	return errors.As(err, &se) && se.Class == sandbox.BadInput && se.Field == "workload.workdir"
}
