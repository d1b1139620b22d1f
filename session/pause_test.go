package session

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// pausing gives fx's manager a directory for paused workspaces and a
// Reacquire that leases fake sandboxes, refusing with refuse while set.
func (fx *fixture) pausing(t *testing.T) (dir string, refuse *error) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "paused")
	refuse = new(error)
	var err error
	fx.m, err = New(fx.pausingConfig(dir, refuse))
	if err != nil {
		t.Fatal(err)
	}
	return dir, refuse
}

func (fx *fixture) pausingConfig(dir string, refuse *error) Config {
	return Config{Store: fx.st, Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return fx.now }, Dir: dir,
		Reacquire: func(ctx context.Context, tenant, backend string, c *sandbox.Claim, _ *sandbox.Paused) (Held, error) {
			if *refuse != nil {
				return Held{}, *refuse
			}
			if backend != "container" {
				return Held{}, sandbox.Errorf(sandbox.BackendFailure, "", "resumed on %s", backend)
			}
			return fx.acquire(ctx, c)
		}}
}

func (fx *fixture) write(t *testing.T, tenant, id, path, data string) {
	t.Helper()
	if _, err := fx.m.File(context.Background(), tenant, id, &sandbox.FileOp{Op: sandbox.FileWrite, Path: path, Data: []byte(data)}); err != nil {
		t.Fatal(err)
	}
}

func (fx *fixture) read(t *testing.T, tenant, id, path string) string {
	t.Helper()
	fr, err := fx.m.File(context.Background(), tenant, id, &sandbox.FileOp{Op: sandbox.FileRead, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	return string(fr.Data)
}

// TestPauseAndResume: a paused session has no sandbox and its workspace on
// disk (0600); the next file operation resumes it into a fresh sandbox of
// the same backend, claimed as at creation, with its files; the kept
// workspace is then gone.
func TestPauseAndResume(t *testing.T) {
	fx := newFixture(t, 10)
	dir, _ := fx.pausing(t)
	ctx := context.Background()
	v := fx.create(t, "acme", Spec{Limits: sandbox.Limits{Memory: 64 << 20}})
	fx.write(t, "acme", v.ID, "main.py", "print(1)")
	p, err := fx.m.Pause(ctx, "acme", v.ID)
	if err != nil || p.State != store.SessionPaused || p.Resume != store.ResumeRestart || p.PausedBytes == 0 || fx.boxes[0].destroyed != 1 {
		t.Fatalf("pause: %+v %v (destroyed %d)", p, err, fx.boxes[0].destroyed)
	}
	archive := filepath.Join(dir, v.ID+".tar")
	if fi, err := os.Stat(archive); err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != p.PausedBytes {
		t.Fatalf("kept workspace: %v %v", fi, err)
	}
	if again, err := fx.m.Pause(ctx, "acme", v.ID); err != nil || again.State != store.SessionPaused || len(fx.boxes) != 1 {
		t.Fatalf("pause of a paused session: %+v %v", again, err)
	}
	if got := fx.read(t, "acme", v.ID, "main.py"); got != "print(1)" {
		t.Fatalf("after resume main.py is %q", got)
	}
	if len(fx.boxes) != 2 || !reflect.DeepEqual(fx.boxes[1].claim, fx.boxes[0].claim) {
		t.Fatalf("resumed into %d sandboxes, claim %+v want %+v", len(fx.boxes), fx.boxes[1].claim, fx.boxes[0].claim)
	}
	if _, err := os.Stat(archive); !os.IsNotExist(err) {
		t.Fatalf("the kept workspace outlived the resume: %v", err)
	}
	got, _ := fx.m.Get("acme", v.ID)
	if got.State != store.SessionRunning || got.PausedBytes != 0 || got.Resume != store.ResumeRestart {
		t.Fatalf("resumed: %+v", got)
	}
	fx.m.Pause(ctx, "acme", v.ID)
	if r, err := fx.m.Resume(ctx, "acme", v.ID); err != nil || r.State != store.SessionRunning {
		t.Fatalf("resume on demand: %+v %v", r, err)
	}
	rec, _ := fx.st.GetSession(v.ID)
	want := []string{"creating", "running", "paused:requested", "running:resumed", "paused:requested", "running:requested"}
	if states := statesOf(rec); !slices.Equal(states, want) {
		t.Fatalf("recorded %v, want %v", states, want)
	}
}

// TestPauseTenancy: another tenant's Pause and Resume are the missing
// session's 404, and change nothing; a paused session deleted leaves no
// workspace and leases nothing.
func TestPauseTenancy(t *testing.T) {
	fx := newFixture(t, 10)
	dir, _ := fx.pausing(t)
	ctx := context.Background()
	v := fx.create(t, "acme", Spec{})
	for _, err := range []error{second(fx.m.Pause(ctx, "beta", v.ID)), second(fx.m.Resume(ctx, "beta", v.ID))} {
		if err == nil || err.Error() != "not-found (id): no session "+v.ID {
			t.Fatalf("beta: %v", err)
		}
	}
	fx.m.Pause(ctx, "acme", v.ID)
	for _, err := range []error{second(fx.m.Resume(ctx, "beta", v.ID)), second(fx.m.Exec(ctx, "beta", v.ID, &sandbox.Exec{Argv: []string{"id"}}))} {
		if err == nil || err.Error() != "not-found (id): no session "+v.ID {
			t.Fatalf("beta on the paused session: %v", err)
		}
	}
	if got, _ := fx.m.Get("acme", v.ID); got.State != store.SessionPaused || len(fx.boxes) != 1 {
		t.Fatalf("beta changed the paused session: %+v, %d sandboxes", got, len(fx.boxes))
	}
	d, err := fx.m.Delete("acme", v.ID)
	if err != nil || d.State != store.SessionEnded || d.EndReason != ReasonDeleted || len(fx.boxes) != 1 {
		t.Fatalf("delete of a paused session: %+v %v", d, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left in the paused directory: %v", ents)
	}
}

// TestIdlePausesLifetimeEnds: an idle session pauses at its idle timeout;
// a paused one is not idle, but its lifetime still ends it, its workspace
// removed.
func TestIdlePausesLifetimeEnds(t *testing.T) {
	fx := newFixture(t, 10)
	dir, _ := fx.pausing(t)
	t0 := fx.now
	v := fx.create(t, "acme", Spec{IdleTimeout: time.Minute, MaxLifetime: time.Hour})
	if got := fx.m.Expire(t0.Add(time.Minute)); !slices.Equal(got, []string{v.ID}) {
		t.Fatalf("expire: %v", got)
	}
	if got, _ := fx.m.Get("acme", v.ID); got.State != store.SessionPaused || fx.boxes[0].destroyed != 1 {
		t.Fatalf("idle: %+v", got)
	}
	if got := fx.m.Expire(t0.Add(59 * time.Minute)); len(got) != 0 {
		t.Fatalf("a paused session expired as idle: %v", got)
	}
	if got := fx.m.Expire(t0.Add(time.Hour)); !slices.Equal(got, []string{v.ID}) {
		t.Fatalf("at its lifetime: %v", got)
	}
	rec, _ := fx.st.GetSession(v.ID)
	if want := []string{"creating", "running", "paused:idle-timeout", "ended:max-lifetime"}; !slices.Equal(statesOf(rec), want) {
		t.Fatalf("recorded %v, want %v", statesOf(rec), want)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 || rec.PausedBytes != 0 {
		t.Fatalf("left in the paused directory: %v (record %d bytes)", ents, rec.PausedBytes)
	}
}

// TestPauseRefusals: a workspace that cannot be kept is a Conflict and the
// session runs on (an idle one too, idle again from then); a refused
// resume leaves the session paused, its workspace kept, until the backend
// takes it again.
func TestPauseRefusals(t *testing.T) {
	fx := newFixture(t, 10)
	dir, refuse := fx.pausing(t)
	ctx := context.Background()
	t0 := fx.now
	v := fx.create(t, "acme", Spec{IdleTimeout: time.Minute})
	fx.boxes[0].archiveErr = sandbox.Errorf(sandbox.BadInput, "path", ". makes an archive over the 67108864-byte limit")
	_, err := fx.m.Pause(ctx, "acme", v.ID)
	if err == nil || err.Error() != "conflict: session "+v.ID+" cannot pause: bad-input (path): . makes an archive over the 67108864-byte limit" {
		t.Fatalf("pause of a workspace too large: %v", err)
	}
	fx.m.Expire(t0.Add(time.Minute))
	if got, _ := fx.m.Get("acme", v.ID); got.State != store.SessionRunning || got.LastActive != t0.Add(time.Minute) || fx.boxes[0].destroyed != 0 {
		t.Fatalf("after a failed idle pause: %+v", got)
	}
	fx.boxes[0].archiveErr = nil
	fx.write(t, "acme", v.ID, "keep", "me")
	fx.m.Pause(ctx, "acme", v.ID)
	*refuse = sandbox.Errorf("floor-unmet", "", "backend container is not certified")
	if _, err := fx.m.Exec(ctx, "acme", v.ID, &sandbox.Exec{Argv: []string{"true"}}); err != *refuse {
		t.Fatalf("exec on a refused resume: %v", err)
	}
	if got, _ := fx.m.Get("acme", v.ID); got.State != store.SessionPaused {
		t.Fatalf("after a refused resume: %+v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, v.ID+".tar")); err != nil {
		t.Fatalf("a refused resume lost the workspace: %v", err)
	}
	*refuse = nil
	if got := fx.read(t, "acme", v.ID, "keep"); got != "me" {
		t.Fatalf("keep is %q", got)
	}
}

// TestPausedSurvivesRestart: a paused session is paused after a restart
// and resumes with its files; one whose workspace is gone ends
// workspace-lost; what no paused session owns is removed from the
// directory; a shutdown leaves paused sessions paused.
func TestPausedSurvivesRestart(t *testing.T) {
	fx := newFixture(t, 10)
	dir, refuse := fx.pausing(t)
	ctx := context.Background()
	kept := fx.create(t, "acme", Spec{})
	lost := fx.create(t, "acme", Spec{})
	fx.write(t, "acme", kept.ID, "main.py", "v1")
	fx.m.Pause(ctx, "acme", kept.ID)
	fx.m.Pause(ctx, "acme", lost.ID)
	fx.m.Close()
	if got, _ := fx.m.Get("acme", kept.ID); got.State != store.SessionPaused {
		t.Fatalf("after Close: %+v", got)
	}
	os.Remove(filepath.Join(dir, lost.ID+".tar"))
	stray := []string{"0123456789abcdef0123456789abcdef.tar", kept.ID + ".tar.tmp-4242"}
	for _, n := range stray {
		os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o600)
	}
	m2, err := New(fx.pausingConfig(dir, refuse))
	if err != nil {
		t.Fatal(err)
	}
	fx.m = m2
	if ids, err := m2.Recover(fx.now); err != nil || len(ids) != 0 {
		t.Fatalf("recover: %v %v", ids, err)
	}
	if got, _ := m2.Get("acme", lost.ID); got.State != store.SessionEnded || got.EndReason != ReasonWorkspaceLost {
		t.Fatalf("a paused session without its workspace: %+v", got)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 || ents[0].Name() != kept.ID+".tar" {
		t.Fatalf("the paused directory after recover: %v", ents)
	}
	if got := fx.read(t, "acme", kept.ID, "main.py"); got != "v1" {
		t.Fatalf("main.py after the restart: %q", got)
	}
}

// TestPauseUnfit: a running session whose backend may no longer hold it is
// paused (backend-unfit) and, while the backend stays unfit, refused its
// resume; others run on. Without pausing it ends.
func TestPauseUnfit(t *testing.T) {
	fx := newFixture(t, 10)
	_, refuse := fx.pausing(t)
	ctx := context.Background()
	keep := fx.create(t, "acme", Spec{})
	unfit := fx.create(t, "acme", Spec{Policy: sandbox.Policy{Trust: sandbox.Internal}})
	uncertified := sandbox.Errorf("floor-unmet", "", "backend container is not certified")
	fit := func(backend string, c *sandbox.Claim) error {
		if c.Policy.Trust == sandbox.Internal {
			return uncertified
		}
		return nil
	}
	if got := fx.m.PauseUnfit(ctx, fit); !slices.Equal(got, []string{unfit.ID}) {
		t.Fatalf("paused %v, want %s", got, unfit.ID)
	}
	for id, want := range map[string]store.SessionState{keep.ID: store.SessionRunning, unfit.ID: store.SessionPaused} {
		if got, _ := fx.m.Get("acme", id); got.State != want {
			t.Fatalf("%s: %+v, want %s", id, got, want)
		}
	}
	*refuse = uncertified
	if _, err := fx.m.Exec(ctx, "acme", unfit.ID, &sandbox.Exec{Argv: []string{"true"}}); err != uncertified {
		t.Fatalf("exec on the unfit backend: %v", err)
	}
	if got := fx.m.PauseUnfit(ctx, fit); len(got) != 0 {
		t.Fatalf("paused again: %v", got)
	}
	rec, _ := fx.st.GetSession(unfit.ID)
	if want := []string{"creating", "running", "paused:backend-unfit"}; !slices.Equal(statesOf(rec), want) {
		t.Fatalf("recorded %v, want %v", statesOf(rec), want)
	}

	plain := newFixture(t, 10) // a manager that does not pause
	v := plain.create(t, "acme", Spec{Policy: sandbox.Policy{Trust: sandbox.Internal}})
	plain.m.PauseUnfit(ctx, fit)
	if got, _ := plain.m.Get("acme", v.ID); got.State != store.SessionEnded || got.EndReason != ReasonBackendUnfit || plain.boxes[0].destroyed != 1 {
		t.Fatalf("without pausing: %+v", got)
	}
}
