package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/manager"
	"github.com/wovyr/wovyr/pool"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/server"
)

// peerPool is bench --http's in-process side: a pool of one template on
// one backend made as the daemon makes its default pool — the same sizing
// (server.PoolSizes of the default configuration), clones where the
// backend snapshots the template, reconciled every server.ReconcileEvery.
// So the peer's warm sandbox has waited for its claim as the daemon's has
// (a microVM that sat idle answers slower than one just restored), and its
// refill runs beside the claims that follow, as the daemon's does. What is
// left between the two sides is the daemon's path.
type peerPool struct {
	g        *pool.Group
	p        *pool.Pool
	stop     context.CancelFunc
	loop     sync.WaitGroup
	releases sync.WaitGroup
}

func startPeerPool(ctx context.Context, m *manager.Manager, b sandbox.Backend, tmpl sandbox.Template) (*peerPool, error) {
	cfg, err := config.Config{}.WithDefaults()
	if err != nil {
		return nil, err
	}
	g, err := pool.NewGroup(pool.GroupConfig{Sizes: server.PoolSizes(cfg)})
	if err != nil {
		return nil, err
	}
	var r pool.Restorer
	if mr := m.Restorer(b, tmpl); mr != nil {
		r = mr
	}
	p, err := g.AddRestoring(pool.KeyFor(b.Name(), tmpl), m.Factory(b, tmpl), nil, r)
	if err != nil {
		return nil, errors.Join(err, g.Close(ctx))
	}
	lctx, stop := context.WithCancel(ctx)
	pp := &peerPool{g: g, p: p, stop: stop}
	pp.loop.Go(func() {
		t := time.NewTicker(server.ReconcileEvery)
		defer t.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case now := <-t.C:
				g.ReconcileAsync(lctx, now, nil)
			}
		}
	})
	return pp, nil
}

// claim runs inv on a sandbox of the pool, as the daemon's runner does:
// Acquire and Run, the used sandbox released (destroyed) after the result,
// off the caller's latency.
func (pp *peerPool) claim(ctx context.Context, inv *sandbox.Invocation) error {
	l, err := pp.p.Acquire(ctx)
	if err != nil {
		return err
	}
	res, err := l.Run(ctx, inv)
	pp.releases.Go(func() { l.Release() })
	return resultErr(res, err)
}

// awaitWarm waits until the pool holds a warm sandbox.
func (pp *peerPool) awaitWarm(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for pp.p.Snapshot().Warm < 1 {
		if time.Now().After(deadline) {
			return errors.New(pp.p.Key().Backend + ": the in-process pool did not refill within " + limit.String())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// close stops the refills and destroys every sandbox the pool made.
func (pp *peerPool) close(ctx context.Context) error {
	pp.stop()
	pp.loop.Wait()
	pp.releases.Wait()
	return pp.g.Close(context.WithoutCancel(ctx))
}
