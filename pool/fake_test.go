package pool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/wovyr/wovyr/sandbox"
)

// fakes is an in-memory backend for the pool's own tests: it counts live
// sandboxes, tracks the most ever live at once and can fail on demand.
type fakes struct {
	mu        sync.Mutex
	next      int
	live, max int
	destroyed []int
	fail      atomic.Bool // the factory fails while set
	missing   atomic.Bool // the template is missing (a permanent failure) while set
	calls     atomic.Int64
	reset     func(*fakeSandbox) error // nil: not a Resetter
	block     chan struct{}            // if set, the factory waits on it
	deaf      bool                     // the factory ignores ctx while blocked
}

type fakeSandbox struct {
	f         *fakes
	id        int
	destroyed atomic.Int32
	runs      atomic.Int32
}

func (f *fakes) factory(ctx context.Context) (sandbox.Sandbox, error) {
	f.calls.Add(1)
	if f.block != nil && f.deaf {
		<-f.block
	} else if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if f.fail.Load() {
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "fake backend is down")
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	f.live++
	f.max = max(f.max, f.live)
	s := &fakeSandbox{f: f, id: f.next}
	if f.reset != nil {
		return &resettable{s}, nil
	}
	return s, nil
}

// check is the fake's Config.Check: the template exists unless missing.
func (f *fakes) check() error {
	if f.missing.Load() {
		return &sandbox.Error{Class: sandbox.BadInput, Field: "template.image", Msg: `no template "py" on this node`,
			Err: errors.New("build it: wovyr image build py")}
	}
	return nil
}

func (f *fakes) snapshot() (live, most int, destroyed []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.live, f.max, append([]int(nil), f.destroyed...)
}

func (s *fakeSandbox) Run(ctx context.Context, inv *sandbox.Invocation) (*sandbox.Result, error) {
	if s.destroyed.Load() != 0 {
		return nil, errors.New("run on a destroyed sandbox")
	}
	s.runs.Add(1)
	return &sandbox.Result{Stdout: fmt.Appendf(nil, "sandbox %d ran for %s", s.id, inv.Tenant)}, nil
}

func (s *fakeSandbox) Destroy(context.Context) error {
	if s.destroyed.Add(1) != 1 {
		return errors.New("destroyed twice")
	}
	s.f.mu.Lock()
	s.f.live--
	s.f.destroyed = append(s.f.destroyed, s.id)
	s.f.mu.Unlock()
	return nil
}

type resettable struct{ *fakeSandbox }

func (r *resettable) Reset(context.Context) error { return r.f.reset(r.fakeSandbox) }

// idOf returns the fake's id behind a leased sandbox.
func idOf(l *Lease) int {
	switch s := l.st.sb.(type) {
	case *fakeSandbox:
		return s.id
	case *resettable:
		return s.id
	}
	return -1
}

// syncBuffer is a log sink safe for the cleanup goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newPool(t *testing.T, cfg Config) (*Pool, *syncBuffer) {
	t.Helper()
	var logs syncBuffer
	if cfg.Key == (Key{}) {
		cfg.Key = Key{Backend: "fake", Template: "t"}
	}
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p, &logs
}

func inv(tenant string) *sandbox.Invocation {
	return &sandbox.Invocation{Tenant: tenant, Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"true"}}}
}

// slotsFree reports whether all n slots of p's semaphore are free, leaving
// them free.
func slotsFree(p *Pool, n int) bool {
	if !p.sem.TryAcquire(int64(n)) {
		return false
	}
	p.sem.Release(int64(n))
	return true
}

type acquired struct {
	l   *Lease
	err error
}

// acquireBehind starts an Acquire on a goroutine and returns once it has
// missed the warm set (so it is creating or waiting); its outcome arrives
// on the channel. Use it only on a pool with no warm sandbox.
func acquireBehind(ctx context.Context, p *Pool) <-chan acquired {
	misses := p.Metrics().Misses.Load()
	c := make(chan acquired, 1)
	go func() {
		l, err := p.Acquire(ctx)
		c <- acquired{l, err}
	}()
	for p.Metrics().Misses.Load() == misses {
		runtime.Gosched()
	}
	return c
}

func mustAcquire(t *testing.T, p *Pool) *Lease {
	t.Helper()
	l, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return l
}
