package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/wovyr/wovyr/sandbox"
)

// memProcs are memBox's background processes (memBox implements
// sandbox.Processes here): each runs until killed, its stdout its argv.
var memProcs = struct {
	sync.Mutex
	m    map[*memBox][]*sandbox.Process
	open map[*sandbox.Process]bool // started with an open stdin, not yet closed
}{m: map[*memBox][]*sandbox.Process{}, open: map[*sandbox.Process]bool{}}

func (b *memBox) Start(_ context.Context, e *sandbox.Exec) (*sandbox.Process, error) {
	memProcs.Lock()
	defer memProcs.Unlock()
	p := &sandbox.Process{ID: e.ID, Pid: 40 + len(memProcs.m[b]), Argv: e.Argv, Running: true, Stdout: []byte(strings.Join(e.Argv, " ") + "\n")}
	memProcs.m[b] = append(memProcs.m[b], p)
	memProcs.open[p] = e.OpenStdin
	return p, nil
}

// WriteStdin takes at most 3 bytes a call, as a pipe that is nearly full
// would, echoing them to stdout; a close ends the process (exit 0).
func (b *memBox) WriteStdin(_ context.Context, id string, data []byte, end bool) (int, error) {
	memProcs.Lock()
	defer memProcs.Unlock()
	i, err := b.proc(id)
	if err != nil {
		return 0, err
	}
	p := memProcs.m[b][i]
	if !memProcs.open[p] {
		return 0, sandbox.Errorf(sandbox.Conflict, "process", "background process %s: its stdin is closed", id)
	}
	n := min(len(data), 3)
	p.Stdout = append(p.Stdout, data[:n]...)
	if end && n == len(data) {
		memProcs.open[p], p.Running = false, false
	}
	return n, nil
}

func (b *memBox) Processes(context.Context) ([]sandbox.Process, error) {
	memProcs.Lock()
	defer memProcs.Unlock()
	out := []sandbox.Process{}
	for _, p := range memProcs.m[b] {
		out = append(out, *p)
	}
	return out, nil
}

func (b *memBox) proc(id string) (int, error) {
	i := slices.IndexFunc(memProcs.m[b], func(p *sandbox.Process) bool { return p.ID == id })
	if i < 0 {
		return i, sandbox.Errorf(sandbox.NotFound, "process", "no %s", id)
	}
	return i, nil
}

func (b *memBox) Process(_ context.Context, id string) (*sandbox.Process, error) {
	memProcs.Lock()
	defer memProcs.Unlock()
	i, err := b.proc(id)
	if err != nil {
		return nil, err
	}
	p := *memProcs.m[b][i]
	return &p, nil
}

func (b *memBox) Kill(_ context.Context, id string) (*sandbox.Process, error) {
	memProcs.Lock()
	defer memProcs.Unlock()
	i, err := b.proc(id)
	if err != nil {
		return nil, err
	}
	p := memProcs.m[b][i]
	p.Running, p.Killed, p.ExitCode, p.Signal = false, true, 137, "killed"
	memProcs.m[b] = slices.Delete(memProcs.m[b], i, i+1)
	return p, nil
}

// TestSessionBackgroundCLI: exec --background prints the exec id, ps lists
// it and prints its output, kill ends it, and a second kill is the API's
// 404.
func TestSessionBackgroundCLI(t *testing.T) {
	url := memDaemon(t)
	run := sessionCLI(t, url)
	id, _, code := run("create", "--trust", "trusted")
	id = strings.TrimSpace(id)
	if code != 0 {
		t.Fatalf("create: %d", code)
	}
	eid, errs, code := run("exec", "--background", id, "--", "serve", "8080")
	eid = strings.TrimSpace(eid)
	if code != 0 || len(eid) != len(sandbox.NewID()) || errs != "" {
		t.Fatalf("exec --background: %q %q %d", eid, errs, code)
	}
	out, _, code := run("ps", id)
	if f := strings.Fields(out); code != 0 || len(f) != 14 || f[6] != eid || f[7] != "40" || f[8] != "running" || f[9] != "-" || f[12] != "serve" || f[13] != "8080" {
		t.Errorf("ps: %d %q", code, out)
	}
	if out, errs, code := run("ps", id, eid); code != 0 || out != "serve 8080\n" || errs != "" {
		t.Errorf("ps ID EID: %d %q %q", code, out, errs)
	}
	if out, errs, code := run("kill", id, eid); code != 0 || out != eid+" killed 137 (killed)\n" || errs != "" {
		t.Errorf("kill: %d %q %q", code, out, errs)
	}
	if _, errs, code := run("kill", id, eid); code != exitBadInput || errs != "wovyr: not-found (exec): no background process "+eid+" in session "+id+"\n" {
		t.Errorf("a second kill: %d %q", code, errs)
	}
	if out, _, code := run("ps", id); code != 0 || len(strings.Fields(out)) != 6 {
		t.Errorf("ps after the kill: %d %q", code, out)
	}
}

// TestSessionWriteCLI: exec --background --open-stdin starts a process
// whose stdin session write streams this command's stdin to, resending
// what the pipe did not take and closing it at the end; a second write is
// the closed stdin's conflict, and --open-stdin without --background is
// refused.
func TestSessionWriteCLI(t *testing.T) {
	url := memDaemon(t)
	run := func(in string, args ...string) (string, string, int) {
		t.Helper()
		var out, errb bytes.Buffer
		sc := &sessionCtx{g: &globals{stateDir: t.TempDir()}, in: strings.NewReader(in), stdout: &out, stderr: &errb}
		args = append([]string{args[0], "--remote", url, "--token", "tok"}, args[1:]...)
		code := sc.dispatch(context.Background(), args)
		return out.String(), errb.String(), code
	}
	id, _, _ := run("", "create", "--trust", "trusted")
	id = strings.TrimSpace(id)
	eid, errs, code := run("", "exec", "--background", "--open-stdin", id, "--", "cat")
	eid = strings.TrimSpace(eid)
	if code != 0 || errs != "" {
		t.Fatalf("exec --background --open-stdin: %q %q %d", eid, errs, code)
	}
	if out, errs, code := run("hello, world\n", "write", id, eid); code != 0 || out != "" || errs != "" {
		t.Fatalf("write: %d %q %q", code, out, errs)
	}
	if out, _, code := run("", "ps", id, eid); code != 0 || out != "cat\nhello, world\n" {
		t.Errorf("ps ID EID after the write: %d %q", code, out)
	}
	if _, errs, code := run("more", "write", id, eid); code != exitBadInput || errs != "wovyr: conflict (process): background process "+eid+": its stdin is closed\n" {
		t.Errorf("a second write: %d %q", code, errs)
	}
	if _, errs, code := run("", "exec", "--open-stdin", id, "--", "cat"); code != exitBadInput || errs != "wovyr: bad-input (open_stdin): --open-stdin needs --background\n" {
		t.Errorf("--open-stdin alone: %d %q", code, errs)
	}
}
