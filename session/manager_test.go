package session

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// fakeBox is an in-memory session sandbox: files in a map, execs echo.
type fakeBox struct {
	mu    sync.Mutex
	claim *sandbox.Claim
	files map[string][]byte
	execs int
	fail  error // Exec's error while set
	// archiveErr is FileArchive's error while set.
	archiveErr error
	destroyed  int
	// gate, if set, makes an exec of "live" stream "first", wait for it,
	// then stream "second" (its stdout "firstsecond"), as a backend that
	// streams does.
	gate chan struct{}
}

func (f *fakeBox) Run(context.Context, *sandbox.Invocation) (*sandbox.Result, error) {
	return nil, errors.New("not for invocations")
}

func (f *fakeBox) Destroy(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.destroyed++
	return nil
}

func (f *fakeBox) Open(_ context.Context, c *sandbox.Claim) error {
	f.claim, f.files = c, map[string][]byte{}
	return nil
}

func (f *fakeBox) Exec(ctx context.Context, e *sandbox.Exec) (*sandbox.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, f.fail
	}
	f.execs++
	if e.Argv[0] == "live" && f.gate != nil {
		out := sandbox.OutputOf(ctx)
		out(sandbox.Chunk{Stream: sandbox.Stdout, Data: []byte("first")})
		out(sandbox.Chunk{Stream: sandbox.Stderr, Data: []byte("warn")})
		select {
		case <-f.gate:
		case <-ctx.Done():
			return &sandbox.Result{Stdout: []byte("first"), Stderr: []byte("warn"), Class: sandbox.Killed, ExitCode: 137}, nil
		}
		out(sandbox.Chunk{Stream: sandbox.Stdout, Data: []byte("second")})
		return &sandbox.Result{Stdout: []byte("firstsecond"), Stderr: []byte("warn")}, nil
	}
	return &sandbox.Result{Stdout: []byte(e.Argv[0])}, nil
}

func (f *fakeBox) File(_ context.Context, op *sandbox.FileOp) (*sandbox.FileReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch op.Op {
	case sandbox.FileWrite:
		f.files[op.Path] = op.Data
		return &sandbox.FileReply{}, nil
	case sandbox.FileRead:
		if b, ok := f.files[op.Path]; ok {
			return &sandbox.FileReply{Data: b}, nil
		}
	case sandbox.FileArchive: // the files as JSON: the tar itself is the agent's (agent/archive.go)
		if f.archiveErr != nil {
			return nil, f.archiveErr
		}
		b, _ := json.Marshal(f.files)
		return &sandbox.FileReply{Data: b}, nil
	case sandbox.FileExtract:
		if err := json.Unmarshal(op.Data, &f.files); err != nil {
			return nil, sandbox.Errorf(sandbox.BadInput, "data", "not an archive: %v", err)
		}
		return &sandbox.FileReply{}, nil
	}
	return nil, sandbox.Errorf(sandbox.NotFound, "path", "no %s", op.Path)
}

type fixture struct {
	m     *Manager
	st    *store.Store
	boxes []*fakeBox
	now   time.Time
	// snapCfg and fresh: snapshotting's configuration and Acquire.
	snapCfg Config
	fresh   Acquire
}

func newFixture(t *testing.T, quota int) *fixture {
	t.Helper()
	st, err := store.Open(t.TempDir(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	fx := &fixture{st: st, now: time.Unix(1_000_000, 0).UTC()}
	fx.m, err = New(Config{Store: st, Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return fx.now },
		Admit: func(tenant string, live int) error {
			if live >= quota {
				return sandbox.Errorf("rate-limited", "", "tenant %s has %d sessions, its quota", tenant, quota)
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	return fx
}

func (fx *fixture) acquire(ctx context.Context, _ *sandbox.Claim) (Held, error) {
	b := &fakeBox{}
	fx.boxes = append(fx.boxes, b)
	return Held{Sandbox: b, Release: func() error { return b.Destroy(ctx) }}, nil
}

var untrusted = sandbox.Policy{Trust: sandbox.Untrusted}

func (fx *fixture) create(t *testing.T, tenant string, sp Spec) View {
	t.Helper()
	if !sp.Policy.Trust.Valid() {
		sp.Policy = untrusted
	}
	v, err := fx.m.Create(context.Background(), tenant, "container", sp, fx.acquire)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestLifecycleAndTenancy: create, exec, files, another tenant's 404 (the
// same bytes as a missing id's), delete, then 409 on the ended session.
func TestLifecycleAndTenancy(t *testing.T) {
	fx := newFixture(t, 10)
	ctx := context.Background()
	v := fx.create(t, "acme", Spec{})
	if v.State != store.SessionRunning || len(v.ID) != 32 || v.IdleTimeout != DefaultIdleTimeout || v.MaxLifetime != DefaultMaxLifetime || v.Backend != "container" {
		t.Fatalf("created %+v", v)
	}
	if c := fx.boxes[0].claim; c.ID != v.ID || c.Tenant != "acme" || c.Policy.Trust != sandbox.Untrusted {
		t.Fatalf("claim %+v", c)
	}
	if _, err := fx.m.File(ctx, "acme", v.ID, &sandbox.FileOp{Op: sandbox.FileWrite, Path: "main.py", Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if res, err := fx.m.Exec(ctx, "acme", v.ID, &sandbox.Exec{Argv: []string{"python3"}}); err != nil || string(res.Stdout) != "python3" {
		t.Fatalf("exec: %v %v", res, err)
	}
	_, other := fx.m.Get("beta", v.ID)
	_, missing := fx.m.Get("beta", "0123456789abcdef0123456789abcdef")
	for _, err := range []error{other, missing} {
		if sandbox.ClassOf(err) != sandbox.NotFound || sandbox.FieldOf(err) != "id" {
			t.Fatalf("another tenant's session: %v", err)
		}
	}
	if want := "not-found (id): no session " + v.ID; other.Error() != want {
		t.Fatalf("got %q, want %q", other, want)
	}
	for _, err := range []error{
		second(fx.m.Exec(ctx, "beta", v.ID, &sandbox.Exec{Argv: []string{"id"}})),
		second(fx.m.File(ctx, "beta", v.ID, &sandbox.FileOp{Op: sandbox.FileRead, Path: "main.py"})),
		second(fx.m.Delete("beta", v.ID)),
	} {
		if err == nil || err.Error() != other.Error() {
			t.Fatalf("beta reached acme's session: %v", err)
		}
	}
	if l, _ := fx.m.List("beta"); len(l) != 0 {
		t.Fatalf("beta lists %v", l)
	}
	if l, _ := fx.m.List("acme"); len(l) != 1 || l[0].ID != v.ID || l[0].Execs != 1 {
		t.Fatalf("acme lists %+v", l)
	}
	got, err := fx.m.Delete("acme", v.ID)
	if err != nil || got.State != store.SessionEnded || got.EndReason != ReasonDeleted || fx.boxes[0].destroyed != 1 {
		t.Fatalf("delete: %+v %v", got, err)
	}
	want := "conflict (id): session " + v.ID + " has ended (ended: deleted)"
	for _, err := range []error{
		second(fx.m.Exec(ctx, "acme", v.ID, &sandbox.Exec{Argv: []string{"id"}})),
		second(fx.m.Delete("acme", v.ID)),
	} {
		if err == nil || err.Error() != want {
			t.Fatalf("after delete: %v, want %s", err, want)
		}
	}
	rec, _ := fx.st.GetSession(v.ID)
	if states := statesOf(rec); !slices.Equal(states, []string{"creating", "running", "ended:deleted"}) {
		t.Fatalf("recorded %v", states)
	}
}

func statesOf(rec store.Session) []string {
	var out []string
	for _, tr := range rec.Transitions {
		s := string(tr.State)
		if tr.Reason != "" {
			s += ":" + tr.Reason
		}
		out = append(out, s)
	}
	return out
}

func second[T any](_ T, err error) error { return err }

// TestBadRequestsChangeNothing: bad timeouts and a tenant over its quota
// are refused before anything is recorded or leased.
func TestBadRequestsChangeNothing(t *testing.T) {
	fx := newFixture(t, 1)
	cases := []struct {
		sp   Spec
		want string
	}{
		{Spec{IdleTimeout: -time.Second}, "bad-input (idle_timeout): must be between 1s and the session's max_lifetime (1h0m0s)"},
		{Spec{IdleTimeout: 2 * time.Hour, MaxLifetime: time.Hour}, "bad-input (idle_timeout): must be between 1s and the session's max_lifetime (1h0m0s)"},
		{Spec{MaxLifetime: 25 * time.Hour}, "bad-input (max_lifetime): must be between 1s and 24h0m0s"},
		{Spec{MaxLifetime: time.Millisecond}, "bad-input (max_lifetime): must be between 1s and 24h0m0s"},
		{Spec{Limits: sandbox.Limits{Memory: -1}}, "bad-input (limits.memory): must not be negative"},
	}
	for _, c := range cases {
		c.sp.Policy = untrusted
		if _, err := fx.m.Create(context.Background(), "acme", "container", c.sp, fx.acquire); err == nil || err.Error() != c.want {
			t.Errorf("%+v: got %v, want %s", c.sp, err, c.want)
		}
	}
	fx.create(t, "acme", Spec{})
	if _, err := fx.m.Create(context.Background(), "acme", "container", Spec{Policy: untrusted}, fx.acquire); err == nil ||
		err.Error() != "rate-limited: tenant acme has 1 sessions, its quota" {
		t.Errorf("over quota: %v", err)
	}
	fx.create(t, "beta", Spec{}) // the quota is per tenant
	n := 0
	fx.st.EachSession(func(store.Session) error { n++; return nil })
	if n != 2 || len(fx.boxes) != 2 {
		t.Fatalf("%d records and %d sandboxes, want 2 and 2", n, len(fx.boxes))
	}
}

// TestExpire: idle and lifetime end sessions at their time, and not a
// nanosecond before; activity defers the idle end, not the lifetime.
func TestExpire(t *testing.T) {
	fx := newFixture(t, 10)
	t0 := fx.now
	idle := fx.create(t, "acme", Spec{IdleTimeout: time.Minute, MaxLifetime: time.Hour})
	busy := fx.create(t, "acme", Spec{IdleTimeout: time.Minute, MaxLifetime: 2 * time.Minute})
	if got := fx.m.Expire(t0.Add(time.Minute - 1)); len(got) != 0 {
		t.Fatalf("expired early: %v", got)
	}
	fx.now = t0.Add(50 * time.Second)
	if _, err := fx.m.Exec(context.Background(), "acme", busy.ID, &sandbox.Exec{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if got := fx.m.Expire(t0.Add(time.Minute)); !slices.Equal(got, []string{idle.ID}) {
		t.Fatalf("at one minute: %v, want only %s", got, idle.ID)
	}
	for now := t0.Add(time.Minute); now.Before(t0.Add(2 * time.Minute)); now = now.Add(40 * time.Second) {
		fx.now = now
		if _, err := fx.m.Exec(context.Background(), "acme", busy.ID, &sandbox.Exec{Argv: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := fx.m.Expire(t0.Add(2 * time.Minute)); !slices.Equal(got, []string{busy.ID}) {
		t.Fatalf("at its lifetime: %v", got)
	}
	for id, reason := range map[string]string{idle.ID: ReasonIdle, busy.ID: ReasonLifetime} {
		v, _ := fx.m.Get("acme", id)
		if v.State != store.SessionEnded || v.EndReason != reason {
			t.Errorf("%s: %+v, want ended by %s", id, v, reason)
		}
	}
	if fx.boxes[0].destroyed != 1 || fx.boxes[1].destroyed != 1 {
		t.Fatal("an expired session's sandbox was not destroyed")
	}
}

// TestBackendFailureEndsSession: an exec that leaves the sandbox unusable
// ends the session, recorded; a bad exec does not.
func TestBackendFailureEndsSession(t *testing.T) {
	fx := newFixture(t, 10)
	v := fx.create(t, "acme", Spec{})
	fx.boxes[0].fail = sandbox.Errorf(sandbox.BadInput, "wall", "too long")
	if _, err := fx.m.Exec(context.Background(), "acme", v.ID, &sandbox.Exec{Argv: []string{"x"}}); sandbox.ClassOf(err) != sandbox.BadInput {
		t.Fatal(err)
	}
	fx.boxes[0].fail = sandbox.Errorf(sandbox.BackendFailure, "", "agent gone")
	if _, err := fx.m.Exec(context.Background(), "acme", v.ID, &sandbox.Exec{Argv: []string{"x"}}); sandbox.ClassOf(err) != sandbox.BackendFailure {
		t.Fatal(err)
	}
	got, _ := fx.m.Get("acme", v.ID)
	if got.State != store.SessionEnded || got.EndReason != ReasonBackendFailure || fx.boxes[0].destroyed != 1 {
		t.Fatalf("after the failure: %+v", got)
	}
}

// TestCreateFailureIsRecorded: a session whose sandbox could not be leased
// ends create-failed, recorded, and counts no more against the quota.
func TestCreateFailureIsRecorded(t *testing.T) {
	fx := newFixture(t, 1)
	boom := sandbox.Errorf(sandbox.BackendFailure, "", "no sandbox")
	_, err := fx.m.Create(context.Background(), "acme", "container", Spec{Policy: untrusted}, func(context.Context, *sandbox.Claim) (Held, error) { return Held{}, boom })
	if err != boom {
		t.Fatalf("got %v", err)
	}
	l, _ := fx.m.List("acme")
	if len(l) != 1 || l[0].State != store.SessionEnded || l[0].EndReason != ReasonCreateFailed {
		t.Fatalf("recorded %+v", l)
	}
	fx.create(t, "acme", Spec{})
}

// TestRecoverAndClose: a shutdown interrupts live sessions, and a restart
// records those a crash left running as interrupted.
func TestRecoverAndClose(t *testing.T) {
	fx := newFixture(t, 10)
	a := fx.create(t, "acme", Spec{})
	fx.m.Close()
	if v, _ := fx.m.Get("acme", a.ID); v.State != store.SessionInterrupted || v.EndReason != ReasonShutdown || fx.boxes[0].destroyed != 1 {
		t.Fatalf("after Close: %+v", v)
	}
	if _, err := fx.m.Create(context.Background(), "acme", "container", Spec{Policy: untrusted}, fx.acquire); !errors.Is(err, ErrClosed) {
		t.Fatalf("create after Close: %v", err)
	}
	// A crash: the record says running, no daemon holds it.
	crashed := store.Session{ID: "c1", Tenant: "acme", State: store.SessionRunning, Created: fx.now, Claim: sandbox.Claim{Policy: untrusted},
		Transitions: []store.SessionTransition{{State: store.SessionCreating, At: fx.now}, {State: store.SessionRunning, At: fx.now}}}
	if err := fx.st.BeginSession(crashed); err != nil {
		t.Fatal(err)
	}
	m2, _ := New(Config{Store: fx.st, Logger: slog.New(slog.DiscardHandler)})
	ids, err := m2.Recover(fx.now.Add(time.Second))
	if err != nil || !slices.Equal(ids, []string{"c1"}) {
		t.Fatalf("recover: %v %v", ids, err)
	}
	rec, _ := fx.st.GetSession("c1")
	if states := statesOf(rec); !slices.Equal(states, []string{"creating", "running", "interrupted:daemon-restart"}) {
		t.Fatalf("recorded %v", states)
	}
}

// TestHammerExecAndDelete: execs, file writes, gets, an Expire and a
// Delete released at once on one session (run under -race): every exec
// either ran or met the ended session (409), the sandbox is destroyed
// once, and the record ends deleted.
func TestHammerExecAndDelete(t *testing.T) {
	fx := newFixture(t, 10)
	v := fx.create(t, "acme", Spec{})
	ctx := context.Background()
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var err error
			switch i % 4 {
			case 0:
				_, err = fx.m.Exec(ctx, "acme", v.ID, &sandbox.Exec{Argv: []string{"true"}})
			case 1:
				_, err = fx.m.File(ctx, "acme", v.ID, &sandbox.FileOp{Op: sandbox.FileWrite, Path: "f", Data: []byte("x")})
			case 2:
				_, err = fx.m.Get("acme", v.ID)
			case 3:
				fx.m.Expire(fx.now)
			}
			if err != nil && sandbox.ClassOf(err) != sandbox.Conflict {
				errs <- err
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-start
		if _, err := fx.m.Delete("acme", v.ID); err != nil {
			errs <- err
		}
	}()
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got, _ := fx.m.Get("acme", v.ID)
	if got.State != store.SessionEnded || got.EndReason != ReasonDeleted || fx.boxes[0].destroyed != 1 {
		t.Fatalf("after the hammer: %+v, destroyed %d times", got, fx.boxes[0].destroyed)
	}
}
