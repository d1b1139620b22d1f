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
	m map[*memBox][]*sandbox.Process
}{m: map[*memBox][]*sandbox.Process{}}

func (b *memBox) Start(_ context.Context, e *sandbox.Exec) (*sandbox.Process, error) {
	memProcs.Lock()
	defer memProcs.Unlock()
	p := &sandbox.Process{ID: e.ID, Pid: 40 + len(memProcs.m[b]), Argv: e.Argv, Running: true, Stdout: []byte(strings.Join(e.Argv, " ") + "\n")}
	memProcs.m[b] = append(memProcs.m[b], p)
	return p, nil
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
	run := func(args ...string) (string, string, int) {
		t.Helper()
		var out, errb bytes.Buffer
		sc := &sessionCtx{g: &globals{stateDir: t.TempDir()}, stdout: &out, stderr: &errb}
		args = append([]string{args[0], "--remote", url, "--token", "tok"}, args[1:]...)
		code := sc.dispatch(context.Background(), args)
		return out.String(), errb.String(), code
	}
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
