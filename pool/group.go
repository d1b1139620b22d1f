package pool

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/wovyr/wovyr/autoscale"
	"github.com/wovyr/wovyr/sandbox"
)

// Sizing sets the size of pools. Backend and Template select the pools it
// applies to; empty means any. The most specific rule wins: backend and
// template, then backend alone, then template alone, then the default.
type Sizing struct {
	Backend, Template string
	MaxLive           int
	Autoscale         autoscale.Config
}

// SizeFor returns the most specific rule in rules for k; false if none
// applies.
func SizeFor(rules []Sizing, k Key) (Sizing, bool) {
	best, score := Sizing{}, -1
	for _, r := range rules {
		if (r.Backend != "" && r.Backend != k.Backend) || (r.Template != "" && r.Template != k.Template) {
			continue
		}
		s := 0
		if r.Backend != "" {
			s += 2
		}
		if r.Template != "" {
			s++
		}
		if s > score {
			best, score = r, s
		}
	}
	return best, score >= 0
}

// GroupConfig configures a Group.
type GroupConfig struct {
	Sizes  []Sizing     // at least one rule must match every key added
	Logger *slog.Logger // passed to every pool; nil discards
}

// Group is the server's set of pools, one per key. It is safe for
// concurrent use.
type Group struct {
	cfg     GroupConfig
	mu      sync.RWMutex
	pools   map[Key]*Pool
	running sync.WaitGroup // reconciles started by ReconcileAsync
}

// NewGroup validates the sizing rules and returns an empty group.
func NewGroup(cfg GroupConfig) (*Group, error) {
	cfg.Sizes = slices.Clone(cfg.Sizes)
	for _, r := range cfg.Sizes {
		if r.MaxLive < 1 {
			return nil, sandbox.Errorf(sandbox.BadInput, "pool.sizes.max_live", "%s/%s: max live must be at least 1", r.Backend, r.Template)
		}
		p, err := autoscale.New(r.Autoscale)
		if err != nil {
			return nil, err
		}
		if p.Config().Max > r.MaxLive {
			return nil, sandbox.Errorf(sandbox.BadInput, "pool.sizes.autoscale.max", "%s/%s: warm max %d exceeds max live %d", r.Backend, r.Template, p.Config().Max, r.MaxLive)
		}
	}
	return &Group{cfg: cfg, pools: make(map[Key]*Pool)}, nil
}

// Add creates the pool for key, sized by the group's rules, with factory
// (the manager's Prepare for that backend and template) and check (nil:
// none; see Config.Check).
func (g *Group) Add(key Key, factory Factory, check Check) (*Pool, error) {
	return g.AddRestoring(key, factory, check, nil)
}

// AddRestoring is Add for a backend that snapshots: the pool fills with
// clones restored through r, factory being the fallback (Config.Restorer).
func (g *Group) AddRestoring(key Key, factory Factory, check Check, r Restorer) (*Pool, error) {
	size, ok := SizeFor(g.cfg.Sizes, key)
	if !ok {
		return nil, sandbox.Errorf(sandbox.BadInput, "pool.sizes", "no sizing rule for %s", key)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, dup := g.pools[key]; dup {
		return nil, sandbox.Errorf(sandbox.BadInput, "pool.key", "pool %s already exists", key)
	}
	p, err := New(Config{Key: key, Factory: factory, Check: check, Restorer: r, MaxLive: size.MaxLive, Autoscale: size.Autoscale, Logger: g.cfg.Logger})
	if err != nil {
		return nil, err
	}
	g.pools[key] = p
	return p, nil
}

// SizeOf returns the sizing rule that applies to key.
func (g *Group) SizeOf(key Key) (Sizing, bool) { return SizeFor(g.cfg.Sizes, key) }

// Get returns the pool for key.
func (g *Group) Get(key Key) (*Pool, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	p, ok := g.pools[key]
	return p, ok
}

// list returns the pools in key order, so that Reconcile and Snapshots are
// deterministic.
func (g *Group) list() []*Pool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	ps := make([]*Pool, 0, len(g.pools))
	for _, p := range g.pools {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b *Pool) int { return compareKeys(a.cfg.Key, b.cfg.Key) })
	return ps
}

func compareKeys(a, b Key) int {
	for _, c := range [][2]string{{a.Backend, b.Backend}, {a.Template, b.Template}, {a.Shape, b.Shape}, {a.Region, b.Region}} {
		if c[0] != c[1] {
			if c[0] < c[1] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// Reconcile reconciles every pool at now, in key order, and joins their
// errors; one failing pool does not stop the others.
func (g *Group) Reconcile(ctx context.Context, now time.Time) error {
	var errs []error
	for _, p := range g.list() {
		errs = append(errs, p.Reconcile(ctx, now))
	}
	return errors.Join(errs...)
}

// ReconcileAsync starts Reconcile at now on every pool whose previous
// decision has been made and returns at once, so that one pool's slow
// create (a VM boot: seconds under TCG) never holds back another pool's
// refill, nor the same pool's next decision: a sandbox claimed while a
// refill is under way is replaced at once. onErr, if not nil, receives each
// failed pool's error (a pool closed meanwhile is not one). Close waits for
// the reconciles this started and their creates.
func (g *Group) ReconcileAsync(ctx context.Context, now time.Time, onErr func(Key, error)) {
	for _, p := range g.list() {
		if !p.busy.CompareAndSwap(false, true) {
			continue
		}
		g.running.Go(func() {
			finish := p.reconcile(ctx, now)
			p.busy.Store(false)
			if err := finish(); err != nil && !errors.Is(err, ErrClosed) && onErr != nil {
				onErr(p.cfg.Key, err)
			}
		})
	}
}

// Resume makes every stalled pool of backend (empty: of every backend)
// retry at its next Reconcile; see Pool.Resume.
func (g *Group) Resume(backend string) {
	for _, p := range g.list() {
		if backend == "" || p.cfg.Key.Backend == backend {
			p.Resume()
		}
	}
}

// Snapshots returns every pool's metrics, in key order.
func (g *Group) Snapshots() []Snapshot {
	ps := g.list()
	out := make([]Snapshot, len(ps))
	for i, p := range ps {
		out[i] = p.Snapshot()
	}
	return out
}

// Close closes every pool and forgets them.
func (g *Group) Close(ctx context.Context) error {
	ps := g.list()
	g.mu.Lock()
	g.pools = make(map[Key]*Pool)
	g.mu.Unlock()
	var errs []error
	for _, p := range ps {
		errs = append(errs, p.Close(ctx))
	}
	// A reconcile still creating hands what it makes to a closed pool,
	// which destroys it; wait for that, so nothing outlives Close.
	g.running.Wait()
	return errors.Join(errs...)
}
