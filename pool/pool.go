// Package pool keeps warm, tenant-neutral sandboxes per key (backend,
// template, resource shape, later region) and leases them out.
//
// A Pool never imports a backend: it is handed a Factory — the manager's
// Prepare for one (backend, template) — so the isolation floor stays checked
// in one place. Acquire is bounded by a weighted semaphore on the number of
// live sandboxes (warm + leased + being created); it takes a warm sandbox if
// there is one (a hit) and otherwise creates one (a miss, cold), waiting for
// a free slot when the bound is reached. Waiting honours ctx: a cancelled or
// expired Acquire leaves the semaphore as it found it.
//
// # Why a sandbox is destroyed after use
//
// Warm sandboxes are tenant-neutral: tenant policy (limits, env, egress) is
// applied by Sandbox.Run, at claim time, never at Prepare. A sandbox that
// ran a tenant's code is therefore never handed to another lease unless it
// implements sandbox.Resetter and its Reset — which must verify, not assume —
// returns nil. A lease that never ran anything goes back warm as it was.
//
// # Why Release and a cleanup
//
// Go has no destructor, so Lease.Release is explicit and idempotent. A lease
// that is garbage-collected without Release is caught by a runtime.AddCleanup
// safety net: it is logged as a leak, counted, and its sandbox destroyed, so a
// forgotten Release costs a log line, not a slot.
//
// What it refuses to do: start goroutines of its own beyond one Acquire
// wait or one reclaim; retry a template that can never be prepared (see
// Stall); scale on a timer (the caller's Reconcile(ctx, now)
// drives refill and trimming, decided by package autoscale); reuse a sandbox
// whose reset failed. It creates nothing on the host itself, so it has no
// leftovers to reconcile after a crash: Close destroys what it holds, and
// each backend's Reconcile removes sandboxes a dead process left behind.
package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/wovyr/wovyr/autoscale"
	"github.com/wovyr/wovyr/sandbox"
)

// ErrClosed is returned (inside a BackendFailure error) by a closed pool.
var ErrClosed = errors.New("pool closed")

// Factory prepares one warm, tenant-neutral sandbox. ctx bounds the
// preparation only, never the sandbox's lifetime.
type Factory func(ctx context.Context) (sandbox.Sandbox, error)

// Config configures one pool. It is copied by New and never changes after.
type Config struct {
	Key     Key     // required: Backend at least
	Factory Factory // required
	// Restorer, if set, fills the pool with clones of a golden snapshot
	// instead of cold prepares (restore.go); Factory, on the same backend,
	// is what a failed restore falls back to.
	Restorer Restorer
	// MaxLive bounds live sandboxes: warm, leased and being created. Required.
	MaxLive int
	// Autoscale sets the warm target; its Max must not exceed MaxLive. The
	// zero value keeps no warm sandbox when idle and at most one otherwise.
	Autoscale autoscale.Config
	// Logger receives leak, reset and destroy reports. Nil discards them.
	Logger *slog.Logger
	// Metrics receives counters and latencies; give each pool its own. Nil
	// means a fresh Metrics, available from Pool.Metrics.
	Metrics *Metrics
	// ResetTimeout bounds Resetter.Reset; zero means 10s.
	ResetTimeout time.Duration
	// DestroyTimeout bounds Sandbox.Destroy; zero means 30s.
	DestroyTimeout time.Duration
	// Check, if not nil, says whether the template can be prepared; a pool
	// stalled by a template Check also refused retries once Check passes.
	Check Check
	// StallRetry is how long a stalled pool waits before it tries one
	// create again on its own (see Stall); zero means 10m.
	StallRetry time.Duration
}

// Pool is a pool of sandboxes for one key. It is safe for concurrent use.
type Pool struct {
	cfg    Config
	log    *slog.Logger
	m      *Metrics
	policy autoscale.Policy

	sem  *semaphore.Weighted  // one unit per live sandbox
	warm chan sandbox.Sandbox // never more than MaxLive, so sends never block
	done chan struct{}        // closed by Close
	mu   sync.Mutex           // orders pushes to warm against Close
	shut atomic.Bool          // set by Close

	live, inUse atomic.Int64          // live: holds a slot; inUse: leased
	arrivals    atomic.Int64          // since the last Reconcile
	misses      atomic.Int64          // since the last Reconcile
	streak      atomic.Int64          // consecutive create failures
	stall       atomic.Pointer[Stall] // nil unless the template cannot be prepared

	rec      sync.Mutex   // serialises Reconcile's decisions
	busy     atomic.Bool  // a decision started by Group.ReconcileAsync runs
	creating atomic.Int64 // refill creates under way
	state    autoscale.State
	target   atomic.Int64
	breaker  atomic.Int64

	gold goldenState // Restorer only
}

// New validates cfg and returns an empty pool; the first Reconcile fills it.
func New(cfg Config) (*Pool, error) {
	switch {
	case cfg.Key.Backend == "":
		return nil, sandbox.Errorf(sandbox.BadInput, "pool.key.backend", "a backend name is required")
	case cfg.Factory == nil:
		return nil, sandbox.Errorf(sandbox.BadInput, "pool.factory", "a factory is required")
	case cfg.MaxLive < 1:
		return nil, sandbox.Errorf(sandbox.BadInput, "pool.max_live", "must be at least 1, got %d", cfg.MaxLive)
	case cfg.ResetTimeout < 0 || cfg.DestroyTimeout < 0 || cfg.StallRetry < 0:
		return nil, sandbox.Errorf(sandbox.BadInput, "pool.timeouts", "must not be negative")
	}
	policy, err := autoscale.New(cfg.Autoscale)
	if err != nil {
		return nil, err
	}
	if mx := policy.Config().Max; mx > cfg.MaxLive {
		return nil, sandbox.Errorf(sandbox.BadInput, "pool.autoscale.max", "warm max %d exceeds max live %d", mx, cfg.MaxLive)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = new(Metrics)
	}
	if cfg.ResetTimeout == 0 {
		cfg.ResetTimeout = 10 * time.Second
	}
	if cfg.DestroyTimeout == 0 {
		cfg.DestroyTimeout = 30 * time.Second
	}
	if cfg.StallRetry == 0 {
		// Long: one prepare per retry of a template nothing said was fixed.
		cfg.StallRetry = 10 * time.Minute
	}
	return &Pool{
		cfg:    cfg,
		log:    cfg.Logger.With("pool", cfg.Key.String()),
		m:      cfg.Metrics,
		policy: policy,
		sem:    semaphore.NewWeighted(int64(cfg.MaxLive)),
		warm:   make(chan sandbox.Sandbox, cfg.MaxLive),
		done:   make(chan struct{}),
	}, nil
}

// Key returns the pool's key.
func (p *Pool) Key() Key { return p.cfg.Key }

// Metrics returns the pool's metrics.
func (p *Pool) Metrics() *Metrics { return p.m }

// Close stops the pool: waiting and later Acquires fail with ErrClosed,
// warm sandboxes are destroyed now, leased ones when they are released.
// It is idempotent and returns the joined destroy errors.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.shut.Load() {
		p.mu.Unlock()
		return nil
	}
	p.shut.Store(true)
	close(p.done)
	p.mu.Unlock()
	p.gold.wait() // a golden capture ends with p.done
	var errs []error
	for {
		select {
		case sb := <-p.warm:
			errs = append(errs, p.discard(ctx, sb))
		default:
			return errors.Join(errs...)
		}
	}
}

// pushWarm returns a tenant-neutral sandbox to the warm set; false means the
// pool is closed and the caller must discard it.
func (p *Pool) pushWarm(sb sandbox.Sandbox) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shut.Load() {
		return false
	}
	select {
	case p.warm <- sb:
		return true
	default: // unreachable while every warm sandbox holds a slot
		return false
	}
}

// discard destroys sb and frees its slot. Destroy gets its own deadline
// under a context that ignores the caller's cancellation.
func (p *Pool) discard(ctx context.Context, sb sandbox.Sandbox) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.DestroyTimeout)
	err := sb.Destroy(dctx)
	cancel()
	p.m.Destroys.Add(1)
	p.freeSlot()
	if err != nil {
		p.m.DestroyFailures.Add(1)
		p.log.Error("destroy failed", "err", err)
		return sandbox.Wrap(sandbox.BackendFailure, err, "pool %s: destroy", p.cfg.Key)
	}
	return nil
}

func (p *Pool) tookSlot() { p.live.Add(1) }

func (p *Pool) freeSlot() {
	p.live.Add(-1)
	p.sem.Release(1)
}

// create runs the factory for a slot the caller holds; on failure it frees
// the slot. Its outcome feeds the breaker's failure streak and stalls the
// pool on a permanent error (a success or a transient error ends a stall),
// unless ctx ended first.
func (p *Pool) create(ctx context.Context) (sandbox.Sandbox, error) {
	sb, err := p.prepare(ctx)
	if err == nil && sb == nil {
		err = errors.New("factory returned no sandbox")
	}
	if err != nil {
		if ctx.Err() == nil { // a caller giving up says nothing about the backend
			p.streak.Add(1)
			if Permanent(err) {
				p.stallOn(err)
			} else {
				p.stall.Store(nil)
			}
		}
		p.m.CreateFailures.Add(1)
		p.freeSlot()
		return nil, fmt.Errorf("pool %s: create: %w", p.cfg.Key, err)
	}
	p.streak.Store(0)
	if p.stall.Swap(nil) != nil {
		p.log.Info("pool no longer stalled: a create succeeded")
	}
	p.m.Creates.Add(1)
	return sb, nil
}

func (p *Pool) closedErr() error {
	return sandbox.Wrap(sandbox.BackendFailure, ErrClosed, "pool %s", p.cfg.Key)
}
