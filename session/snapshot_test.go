package session

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// savedBox is a procBox that can be saved whole (sandbox.Pauser) into a
// fake backend's store of saved sandboxes, its tenant's alone.
type savedBox struct {
	procBox
	saves    *saves
	noSave   bool  // Pause says ErrNoSnapshot
	restored saved // what Open finds: a resumed box's saved state
}

func (b *savedBox) Open(ctx context.Context, c *sandbox.Claim) error {
	b.fakeBox.Open(ctx, c)
	if b.restored.files != nil {
		b.files, b.procs = b.restored.files, b.restored.procs
	}
	return nil
}

type saved struct {
	tenant string
	files  map[string][]byte
	procs  []*sandbox.Process
}

type saves struct {
	mu   sync.Mutex
	next int
	m    map[string]saved
}

func (b *savedBox) Pause(_ context.Context, tenant string) (sandbox.Paused, error) {
	if b.noSave {
		return sandbox.Paused{}, sandbox.ErrNoSnapshot
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.claim.Tenant != tenant {
		return sandbox.Paused{}, sandbox.ErrWrongTenant
	}
	b.saves.mu.Lock()
	defer b.saves.mu.Unlock()
	b.saves.next++
	id := string(rune('a' + b.saves.next))
	b.saves.m[id] = saved{tenant: tenant, files: maps.Clone(b.files), procs: b.procs}
	return sandbox.Paused{Backend: "gvisor", ID: id, Bytes: 4096}, nil
}

// snapshotting gives fx's manager pauses by snapshot: Reacquire restores
// a saved box for its tenant (NotFound once discarded), fresh boxes are
// savedBoxes too.
func (fx *fixture) snapshotting(t *testing.T) (*saves, *[]*savedBox) {
	t.Helper()
	sv := &saves{m: map[string]saved{}}
	boxes := &[]*savedBox{}
	fresh := func() *savedBox {
		b := &savedBox{saves: sv}
		*boxes = append(*boxes, b)
		return b
	}
	cfg := Config{Store: fx.st, Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return fx.now },
		Dir: filepath.Join(t.TempDir(), "paused"),
		Reacquire: func(ctx context.Context, tenant, backend string, c *sandbox.Claim, from *sandbox.Paused) (Held, error) {
			b := fresh()
			if from != nil {
				sv.mu.Lock()
				s, ok := sv.m[from.ID]
				sv.mu.Unlock()
				switch {
				case !ok:
					return Held{}, sandbox.Errorf(sandbox.NotFound, "paused.id", "no paused sandbox %s", from.ID)
				case s.tenant != tenant:
					return Held{}, sandbox.ErrWrongTenant
				}
				b.restored = s
			}
			return Held{Sandbox: b, Release: func() error { return b.Destroy(ctx) }}, nil
		},
		Discard: func(_ context.Context, p sandbox.Paused) error {
			sv.mu.Lock()
			defer sv.mu.Unlock()
			delete(sv.m, p.ID)
			return nil
		}}
	var err error
	if fx.m, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	fx.snapCfg = cfg
	fx.fresh = func(context.Context, *sandbox.Claim) (Held, error) {
		b := fresh()
		return Held{Sandbox: b, Release: func() error { return b.Destroy(context.Background()) }}, nil
	}
	return sv, boxes
}

// TestPauseBySnapshot: a session whose sandbox can be saved whole pauses
// by snapshot — recorded resume: snapshot with the saved sandbox's name,
// its sandbox given back, its background exec still running in the
// record, through a daemon restart too — and resumes into the saved
// sandbox, files and processes as they were; the saved copy is discarded
// once the resume is recorded, and a session ended while paused discards
// its copy. A saved copy gone from the backend ends the session,
// workspace-lost; a sandbox that cannot be saved keeps its workspace.
func TestPauseBySnapshot(t *testing.T) {
	fx := newFixture(t, 10)
	sv, boxes := fx.snapshotting(t)
	ctx := context.Background()
	v, err := fx.m.Create(ctx, "acme", "gvisor", Spec{Policy: untrusted}, fx.fresh)
	if err != nil {
		t.Fatal(err)
	}
	fx.write(t, "acme", v.ID, "main.py", "print(1)")
	if _, err := fx.m.Start(ctx, "acme", v.ID, &sandbox.Exec{ID: "srv", Argv: []string{"serve"}, Background: true}); err != nil {
		t.Fatal(err)
	}
	p, err := fx.m.Pause(ctx, "acme", v.ID)
	if err != nil || p.State != store.SessionPaused || p.Resume != store.ResumeSnapshot || p.Paused == nil || p.PausedBytes != 4096 {
		t.Fatalf("pause: %+v %v", p, err)
	}
	if (*boxes)[0].destroyed != 1 || len(sv.m) != 1 {
		t.Fatalf("after the pause: box destroyed %d times, %d saved", (*boxes)[0].destroyed, len(sv.m))
	}
	if rec, _ := fx.st.GetExec(v.ID, "srv"); rec.State != store.ExecRunning {
		t.Fatalf("the background exec after a snapshot pause: %+v", rec)
	}
	if got := fx.m.SavedSandboxes(); !got[sandbox.Paused{Backend: "gvisor", ID: p.Paused.ID}] || len(got) != 1 {
		t.Fatalf("SavedSandboxes: %v", got)
	}

	// A restart: the paused session and its running exec come back as
	// they were.
	fx.m, err = New(fx.snapCfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fx.m.Recover(fx.now); err != nil {
		t.Fatal(err)
	}
	if rec, _ := fx.st.GetExec(v.ID, "srv"); rec.State != store.ExecRunning {
		t.Fatalf("the background exec after a restart: %+v", rec)
	}
	if got := fx.read(t, "acme", v.ID, "main.py"); got != "print(1)" {
		t.Fatalf("after resume main.py is %q", got)
	}
	r, _ := fx.m.Get("acme", v.ID)
	if r.State != store.SessionRunning || r.Paused != nil || r.PausedBytes != 0 || len(sv.m) != 0 {
		t.Fatalf("resumed: %+v, %d saved left", r, len(sv.m))
	}
	ps, err := fx.m.Processes(ctx, "acme", v.ID)
	if err != nil || len(ps) != 1 || ps[0].ID != "srv" || ps[0].State != store.ExecRunning {
		t.Fatalf("processes after resume: %+v %v", ps, err)
	}

	// Ended while paused: the copy goes with it.
	fx.m.Pause(ctx, "acme", v.ID)
	if len(sv.m) != 1 {
		t.Fatalf("%d saved after the second pause", len(sv.m))
	}
	if _, err := fx.m.Delete("acme", v.ID); err != nil {
		t.Fatal(err)
	}
	if len(sv.m) != 0 {
		t.Fatalf("a deleted paused session left its saved sandbox")
	}

	// A copy gone from the backend: workspace-lost, never silently.
	w, _ := fx.m.Create(ctx, "acme", "gvisor", Spec{Policy: untrusted}, fx.fresh)
	pw, _ := fx.m.Pause(ctx, "acme", w.ID)
	delete(sv.m, pw.Paused.ID)
	if _, err := fx.m.Exec(ctx, "acme", w.ID, &sandbox.Exec{Argv: []string{"true"}}); sandbox.ClassOf(err) != sandbox.Conflict {
		t.Fatalf("exec on a session whose copy is gone: %v", err)
	}
	if got, _ := fx.m.Get("acme", w.ID); got.State != store.SessionEnded || got.EndReason != ReasonWorkspaceLost {
		t.Fatalf("after its copy was lost: %+v", got.Session)
	}

	// Cannot be saved: the workspace is kept instead.
	u, _ := fx.m.Create(ctx, "acme", "gvisor", Spec{Policy: untrusted}, fx.fresh)
	(*boxes)[len(*boxes)-1].noSave = true
	pu, err := fx.m.Pause(ctx, "acme", u.ID)
	if err != nil || pu.Resume != store.ResumeRestart || pu.Paused != nil {
		t.Fatalf("pause of an unsaveable sandbox: %+v %v", pu, err)
	}
	rec, _ := fx.st.GetSession(v.ID)
	if want := []string{"creating", "running", "paused:requested", "running:resumed", "paused:requested", "ended:deleted"}; !slices.Equal(statesOf(rec), want) {
		t.Fatalf("recorded %v, want %v", statesOf(rec), want)
	}
}

// TestSnapshotResumeRefusedStaysPaused: a refused resume (the backend's
// floor, say) leaves the session paused and its saved sandbox kept.
func TestSnapshotResumeRefusedStaysPaused(t *testing.T) {
	fx := newFixture(t, 10)
	sv, _ := fx.snapshotting(t)
	refusal := &sandbox.FloorError{Required: sandbox.MicroVM, Kind: sandbox.KindSession}
	cfg := fx.snapCfg
	inner := cfg.Reacquire
	refuse := true
	cfg.Reacquire = func(ctx context.Context, tenant, backend string, c *sandbox.Claim, from *sandbox.Paused) (Held, error) {
		if refuse {
			return Held{}, refusal
		}
		return inner(ctx, tenant, backend, c, from)
	}
	var err error
	if fx.m, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	v, _ := fx.m.Create(ctx, "acme", "gvisor", Spec{Policy: untrusted}, fx.fresh)
	fx.m.Pause(ctx, "acme", v.ID)
	if _, err := fx.m.Resume(ctx, "acme", v.ID); !errors.As(err, new(*sandbox.FloorError)) {
		t.Fatalf("refused resume: %v", err)
	}
	if got, _ := fx.m.Get("acme", v.ID); got.State != store.SessionPaused || got.Paused == nil || len(sv.m) != 1 {
		t.Fatalf("after a refused resume: %+v, %d saved", got.Session, len(sv.m))
	}
	refuse = false
	if got, err := fx.m.Resume(ctx, "acme", v.ID); err != nil || got.State != store.SessionRunning || len(sv.m) != 0 {
		t.Fatalf("resume once allowed: %+v %v, %d saved", got, err, len(sv.m))
	}
}
