package session

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// procBox is a fakeBox that holds background processes: each started one
// runs until end or Kill.
type procBox struct {
	fakeBox
	procs []*sandbox.Process
}

func (f *procBox) Start(_ context.Context, e *sandbox.Exec) (*sandbox.Process, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.procs) >= sandbox.MaxBackground {
		return nil, sandbox.Errorf(sandbox.BadInput, "background", "too many")
	}
	p := &sandbox.Process{ID: e.ID, Pid: 100 + len(f.procs), Argv: e.Argv, Running: true}
	f.procs = append(f.procs, p)
	return p, nil
}

func (f *procBox) find(id string) (int, error) {
	i := slices.IndexFunc(f.procs, func(p *sandbox.Process) bool { return p.ID == id })
	if i < 0 {
		return -1, sandbox.Errorf(sandbox.NotFound, "process", "no %s", id)
	}
	return i, nil
}

func (f *procBox) Processes(context.Context) ([]sandbox.Process, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []sandbox.Process{}
	for _, p := range f.procs {
		v := *p
		v.Stdout = nil
		out = append(out, v)
	}
	return out, nil
}

func (f *procBox) Process(_ context.Context, id string) (*sandbox.Process, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.find(id)
	if err != nil {
		return nil, err
	}
	v := *f.procs[i]
	return &v, nil
}

func (f *procBox) Kill(_ context.Context, id string) (*sandbox.Process, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.find(id)
	if err != nil {
		return nil, err
	}
	p := f.procs[i]
	if p.Running {
		p.Running, p.Killed, p.ExitCode, p.Signal = false, true, 137, "killed"
	}
	f.procs = slices.Delete(f.procs, i, i+1)
	return p, nil
}

// end makes id exit with code and stdout.
func (f *procBox) end(id string, code int, stdout string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, _ := f.find(id)
	f.procs[i].Running, f.procs[i].ExitCode, f.procs[i].Stdout = false, code, []byte(stdout)
}

// TestBackgroundExecs: a background exec is recorded running with its pid
// before Start returns, listed, recorded done with its output once it has
// ended and killed once killed; another tenant's requests are NotFound in
// the same words as a missing session's; a deleted session's running
// background execs are recorded killed.
func TestBackgroundExecs(t *testing.T) {
	fx := newFixture(t, 2)
	var box *procBox
	acquire := func(ctx context.Context, _ *sandbox.Claim) (Held, error) {
		box = &procBox{}
		return Held{Sandbox: box, Release: func() error { return box.Destroy(ctx) }}, nil
	}
	v, err := fx.m.Create(context.Background(), "acme", "container", Spec{Policy: untrusted}, acquire)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rec, err := fx.m.Start(ctx, "acme", v.ID, &sandbox.Exec{ID: "srv", Argv: []string{"serve"}, Background: true})
	if err != nil || rec.State != store.ExecRunning || rec.Pid != 100 || !rec.Background {
		t.Fatalf("start: %+v, %v", rec, err)
	}
	if got, err := fx.st.GetExec(v.ID, "srv"); err != nil || got.State != store.ExecRunning || got.Pid != 100 {
		t.Fatalf("stored at start: %+v, %v", got, err)
	}
	if _, err := fx.m.Start(ctx, "acme", v.ID, &sandbox.Exec{ID: "job", Argv: []string{"job"}, Background: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.m.Start(ctx, "acme", v.ID, &sandbox.Exec{ID: "srv", Argv: []string{"x"}, Background: true}); !errors.Is(err, sandbox.Conflict) {
		t.Errorf("a used id: %v", err)
	}

	text := func(err error) string {
		if err == nil {
			return ""
		}
		return err.Error()
	}
	for name, f := range map[string]func(id string) error{
		"processes": func(id string) error { _, err := fx.m.Processes(ctx, "beta", id); return err },
		"process":   func(id string) error { _, err := fx.m.Process(ctx, "beta", id, "srv"); return err },
		"kill":      func(id string) error { _, err := fx.m.Kill(ctx, "beta", id, "srv"); return err },
	} {
		theirs := text(f(v.ID))
		if want := "not-found (id): no session " + v.ID; theirs != want || text(f("nosuch")) != "not-found (id): no session nosuch" {
			t.Errorf("%s by another tenant: %q, want %q", name, theirs, want)
		}
	}

	list, err := fx.m.Processes(ctx, "acme", v.ID)
	if err != nil || len(list) != 2 || list[0].ID != "srv" || list[1].ID != "job" || list[0].State != store.ExecRunning {
		t.Fatalf("list: %+v, %v", list, err)
	}
	box.end("job", 3, "out\n")
	list, err = fx.m.Processes(ctx, "acme", v.ID)
	if err != nil || len(list) != 2 || list[1].State != store.ExecDone || list[1].Result.ExitCode != 3 || string(list[1].Result.Stdout) != "out\n" {
		t.Fatalf("list after job ended: %+v, %v", list, err)
	}
	if got, _ := fx.st.GetExec(v.ID, "job"); got.State != store.ExecDone || string(got.Result.Stdout) != "out\n" {
		t.Errorf("job's stored record: %+v", got)
	}

	k, err := fx.m.Kill(ctx, "acme", v.ID, "srv")
	if err != nil || k.State != store.ExecKilled || k.Result.Class != sandbox.Killed || k.Result.ExitCode != 137 {
		t.Fatalf("kill: %+v, %v", k, err)
	}
	if _, err := fx.m.Kill(ctx, "acme", v.ID, "srv"); err == nil || err.Error() != "not-found (exec): no background process srv in session "+v.ID {
		t.Errorf("a second kill: %v", err)
	}
	if p, err := fx.m.Process(ctx, "acme", v.ID, "srv"); err != nil || p.State != store.ExecKilled {
		t.Errorf("the killed process read: %+v, %v", p, err)
	}
	if _, err := fx.m.Process(ctx, "acme", v.ID, "nope"); !errors.Is(err, sandbox.NotFound) {
		t.Errorf("an unknown process: %v", err)
	}

	if _, err := fx.m.Start(ctx, "acme", v.ID, &sandbox.Exec{ID: "last", Argv: []string{"x"}, Background: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.m.Delete("acme", v.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := fx.st.GetExec(v.ID, "last"); got.State != store.ExecKilled || got.Result.Error != "its session ended" {
		t.Errorf("a running background exec after its session's delete: %+v", got)
	}
	if got, _ := fx.st.GetExec(v.ID, "job"); got.State != store.ExecDone {
		t.Errorf("an ended one after the delete: %+v", got)
	}
}

// TestBackgroundRefusedWithoutProcesses: a backend that holds sessions but
// not background processes refuses one, nothing recorded; Exec (which
// waits for a result) refuses one everywhere.
func TestBackgroundRefusedWithoutProcesses(t *testing.T) {
	fx := newFixture(t, 1)
	v := fx.create(t, "acme", Spec{})
	ctx := context.Background()
	_, err := fx.m.Start(ctx, "acme", v.ID, &sandbox.Exec{ID: "b", Argv: []string{"x"}, Background: true})
	if err == nil || err.Error() != "bad-input (background): backend container cannot keep background processes" {
		t.Errorf("start: %v", err)
	}
	if _, err := fx.st.GetExec(v.ID, "b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("recorded: %v", err)
	}
	if _, err := fx.m.Exec(ctx, "acme", v.ID, &sandbox.Exec{Argv: []string{"x"}, Background: true}); !errors.Is(err, sandbox.BadInput) {
		t.Errorf("exec: %v", err)
	}
	if _, err := fx.m.Start(ctx, "acme", v.ID, &sandbox.Exec{Argv: []string{"x"}, Background: true, Stdin: []byte("in")}); err == nil ||
		err.Error() != "bad-input (stdin): a background exec takes no stdin (open_stdin streams it)" {
		t.Errorf("stdin: %v", err)
	}
	if _, err := fx.m.Exec(ctx, "acme", v.ID, &sandbox.Exec{Argv: []string{"cat"}, OpenStdin: true}); err == nil ||
		err.Error() != "bad-input (open_stdin): only a background exec keeps its stdin open" {
		t.Errorf("open_stdin without background: %v", err)
	}
}
