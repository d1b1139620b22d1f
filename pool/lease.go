package pool

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// Lease is one sandbox on loan from a pool (the PooledSandbox). It runs at
// most one invocation; Release gives it back. Release must not race Run.
// Hold it by pointer and never copy it: the leak safety net watches the
// pointer Acquire returned.
type Lease struct {
	st      *leaseState
	cleanup runtime.Cleanup
}

// leaseState is everything the leak cleanup needs; it must never point back
// at the Lease, or the Lease could not be collected.
type leaseState struct {
	p        *Pool
	sb       sandbox.Sandbox
	warm     bool
	acquired time.Time
	used     atomic.Bool
	foreign  bool // AcquireFrom's: a tenant's from the start, never warm
	released atomic.Bool
}

func (p *Pool) lease(sb sandbox.Sandbox, warm bool, start time.Time) *Lease {
	now := time.Now()
	if warm {
		p.m.AcquireWarm.Observe(now.Sub(start))
	} else {
		p.m.AcquireCold.Observe(now.Sub(start))
	}
	p.inUse.Add(1)
	st := &leaseState{p: p, sb: sb, warm: warm, acquired: now}
	l := &Lease{st: st}
	l.cleanup = runtime.AddCleanup(l, reclaim, st)
	return l
}

// Warm reports whether the sandbox was prepared before this Acquire.
func (l *Lease) Warm() bool { return l.st.warm }

// Acquired is when the lease was handed out.
func (l *Lease) Acquired() time.Time { return l.st.acquired }

// Key is the key of the pool the lease came from.
func (l *Lease) Key() Key { return l.st.p.cfg.Key }

// Run runs inv in the leased sandbox; the sandbox applies inv's tenant
// policy now, at claim time. A lease runs one invocation: a second Run, or
// a Run after Release, is a BadInput error and runs nothing.
func (l *Lease) Run(ctx context.Context, inv *sandbox.Invocation) (*sandbox.Result, error) {
	st := l.st
	if err := st.take(); err != nil {
		return nil, err
	}
	res, err := st.sb.Run(ctx, inv)
	if res != nil && res.Timings.Acquired.IsZero() {
		res.Timings.Acquired = st.acquired
	}
	return res, err
}

// Hold marks the lease used and returns its sandbox, for a caller that
// drives the sandbox itself over many calls (a session's, package
// session): Release then resets or destroys it as after a Run. Hold after
// a Run, a Hold or Release is a BadInput error.
func (l *Lease) Hold() (sandbox.Sandbox, error) {
	if err := l.st.take(); err != nil {
		return nil, err
	}
	return l.st.sb, nil
}

// take marks the lease used, once, by a Run or a Hold.
func (st *leaseState) take() error {
	if st.released.Load() {
		return sandbox.Errorf(sandbox.BadInput, "lease", "lease already released")
	}
	if !st.used.CompareAndSwap(false, true) {
		return sandbox.Errorf(sandbox.BadInput, "lease", "a lease runs one invocation or holds one session")
	}
	return nil
}

// Release gives the sandbox back: unused, it goes back warm; used, it is
// reset (only through a verified Resetter) or destroyed. Release is
// idempotent; only the first call does anything. The error reports a
// failed destroy; the slot is freed either way.
func (l *Lease) Release() error {
	st := l.st
	if !st.released.CompareAndSwap(false, true) {
		return nil
	}
	l.cleanup.Stop()
	st.p.inUse.Add(-1)
	return st.p.giveBack(st.sb, st.used.Load() || st.foreign)
}

func (p *Pool) giveBack(sb sandbox.Sandbox, used bool) error {
	ctx := context.Background()
	if used {
		r, ok := sb.(sandbox.Resetter)
		if !ok {
			return p.discard(ctx, sb)
		}
		rctx, cancel := context.WithTimeout(ctx, p.cfg.ResetTimeout)
		err := r.Reset(rctx)
		cancel()
		if err != nil {
			p.m.ResetFailures.Add(1)
			p.log.Warn("reset failed; destroying", "err", err)
			return p.discard(ctx, sb)
		}
		p.m.Resets.Add(1)
	}
	if !p.pushWarm(sb) {
		return p.discard(ctx, sb)
	}
	return nil
}

// reclaim is the safety net for a Lease collected without Release: it
// reports the leak and destroys the sandbox (its state is unknown, so it is
// never reused). It runs on the runtime's cleanup goroutine, so the destroy
// gets a goroutine of its own.
func reclaim(st *leaseState) {
	if !st.released.CompareAndSwap(false, true) {
		return
	}
	p := st.p
	p.m.Leaked.Add(1)
	p.inUse.Add(-1)
	p.log.Error("lease garbage-collected without Release; destroying its sandbox",
		"acquired", st.acquired, "used", st.used.Load(), "warm", st.warm)
	go p.discard(context.Background(), st.sb)
}
