package pool

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// Restorer is what a pool whose backend snapshots fills from: the
// manager's path to sandbox.Snapshotter for the pool's backend and
// template.
type Restorer interface {
	// Golden returns the template's golden snapshot, capturing it if need
	// be (seconds). sandbox.ErrNoSnapshot: this template never will have one.
	Golden(ctx context.Context) (sandbox.Golden, error)
	// Restore prepares a clone of g.
	Restore(ctx context.Context, g sandbox.Golden) (sandbox.Sandbox, error)
}

// goldenRetry is how long a pool waits before capturing again after a
// capture failed; meanwhile it prepares cold.
const goldenRetry = time.Minute

// goldenTimeout bounds one capture.
const goldenTimeout = 5 * time.Minute

// goldenState is a pool's golden snapshot and the one capture that may be
// running for it.
type goldenState struct {
	mu       sync.Mutex
	g        sandbox.Golden
	building bool
	never    bool      // the backend said ErrNoSnapshot
	failed   time.Time // the last capture failure
	builds   sync.WaitGroup
}

func (s *goldenState) wait() { s.builds.Wait() }

// prepare makes one sandbox for the pool: a clone of the golden snapshot
// when there is one, else (and when the restore fails) the factory's cold
// prepare on the same backend — never another backend. A restore failure
// is counted and logged; one that voided the golden drops it, and the next
// prepare starts a new capture.
func (p *Pool) prepare(ctx context.Context) (sandbox.Sandbox, error) {
	g := p.golden()
	if g == nil {
		return p.cfg.Factory(ctx)
	}
	sb, err := p.cfg.Restorer.Restore(ctx, g)
	if err == nil && sb != nil {
		p.m.Restores.Add(1)
		return sb, nil
	}
	if ctx.Err() != nil {
		return nil, err
	}
	p.m.RestoreFallbacks.Add(1)
	p.log.Warn("restore failed; preparing cold on the same backend", "golden", g.ID(), "err", err)
	return p.cfg.Factory(ctx)
}

// golden returns the pool's valid golden snapshot, or nil while it has
// none. Then it starts one capture in the background, so that no acquire
// ever waits for a capture: they prepare cold meanwhile.
func (p *Pool) golden() sandbox.Golden {
	if p.cfg.Restorer == nil {
		return nil
	}
	s := &p.gold
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.g != nil && s.g.Valid() {
		return s.g
	}
	s.g = nil
	if s.building || s.never || p.shut.Load() || (!s.failed.IsZero() && time.Since(s.failed) < goldenRetry) {
		return nil
	}
	s.building = true
	s.builds.Add(1)
	go p.capture()
	return nil
}

// capture obtains the golden snapshot; Close cancels it and waits.
func (p *Pool) capture() {
	s := &p.gold
	defer s.builds.Done()
	ctx, cancel := context.WithTimeout(context.Background(), goldenTimeout)
	defer cancel()
	go func() { // ends with the capture: cancel closes ctx.Done
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	g, err := p.cfg.Restorer.Golden(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.building = false
	switch {
	case err == nil && g != nil:
		s.g = g
		p.m.Goldens.Add(1)
		p.log.Info("golden snapshot ready", "golden", g.ID())
	case errors.Is(err, sandbox.ErrNoSnapshot):
		s.never = true
	default:
		s.failed = time.Now()
		p.m.GoldenFailures.Add(1)
		if p.shut.Load() {
			return
		}
		p.log.Warn("golden snapshot failed; preparing cold", "err", err)
	}
}
