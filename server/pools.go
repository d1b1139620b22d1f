package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wovyr/wovyr/autoscale"
	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/manager"
	"github.com/wovyr/wovyr/pool"
	"github.com/wovyr/wovyr/sandbox"
)

// ReconcileEvery is how often the daemon tops up or trims its warm pools.
const ReconcileEvery = 100 * time.Millisecond

func newPools(cfg config.Config, s *Server) (*pool.Group, error) {
	return pool.NewGroup(pool.GroupConfig{Sizes: PoolSizes(cfg), Logger: s.log})
}

// PoolSizes are the pools' sizing rules of cfg (with its defaults): what
// the daemon's pools are made with.
func PoolSizes(cfg config.Config) []pool.Sizing {
	sizes := make([]pool.Sizing, 0, len(cfg.Pools))
	for _, p := range cfg.Pools {
		sizes = append(sizes, pool.Sizing{Backend: p.Backend, Template: p.Template, MaxLive: p.MaxLive,
			Autoscale: autoscale.Config{Min: p.MinWarm, Max: p.MaxWarm}})
	}
	return sizes
}

// acquire leases a sandbox for inv on b from the pool of (b, template).
func (s *Server) acquire(ctx context.Context, b sandbox.Backend, inv *sandbox.Invocation) (*pool.Lease, error) {
	p, err := s.poolFor(b, manager.TemplateFor(inv))
	if err != nil {
		return nil, err
	}
	return p.Acquire(ctx)
}

// poolFor returns the pool of (b, tmpl), creating it on first use with the
// manager's factory: the manager stays the only path to Backend.Prepare.
func (s *Server) poolFor(b sandbox.Backend, tmpl sandbox.Template) (*pool.Pool, error) {
	key := s.keyFor(b, tmpl)
	if p, ok := s.pools.Get(key); ok {
		return p, nil
	}
	var r pool.Restorer
	if mr := s.mgr.Restorer(b, tmpl); mr != nil {
		r = mr // a backend that snapshots fills its pool with clones
	}
	p, err := s.pools.AddRestoring(key, s.mgr.Factory(b, tmpl), templateCheck(b, tmpl), r)
	if err != nil {
		// Lost a race with another first use: take the winner's.
		if p, ok := s.pools.Get(key); ok {
			return p, nil
		}
		return nil, err
	}
	return p, nil
}

// templateCheck is the pool's cheap test that tmpl can be prepared on b:
// the backend's image check for a command template, else none. It lets a
// pool stalled on a missing image refill as soon as the image is built.
func templateCheck(b sandbox.Backend, tmpl sandbox.Template) pool.Check {
	if ic, ok := b.(sandbox.ImageChecker); ok && tmpl.Kind == sandbox.KindCommand {
		return func() error { return ic.CheckImage(tmpl.Image) }
	}
	return nil
}

// poolLoop drives the pools' autoscaling until ctx ends, then closes them.
// Each pool reconciles on its own (pool.Group.ReconcileAsync): a microVM
// pool booting a VM for seconds holds back no other pool's refill.
func (s *Server) poolLoop(ctx context.Context) {
	t := time.NewTicker(ReconcileEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if err := s.pools.Close(context.WithoutCancel(ctx)); err != nil {
				s.log.Error("close pools", "error", err)
			}
			return
		case now := <-t.C:
			s.pools.ReconcileAsync(ctx, now, func(k pool.Key, err error) {
				if ctx.Err() == nil {
					s.log.Warn("pool reconcile", "pool", k.String(), "error", err)
				}
			})
		}
	}
}

// poolCollector exports every pool's counters, labelled by backend and
// template.
type poolCollector struct {
	g                                            *pool.Group
	hits, misses, warm, live, failures, breakers *prometheus.Desc
	restores, fallbacks, stalled                 *prometheus.Desc
	acquire                                      *prometheus.Desc
}

func newPoolCollector(g *pool.Group) *poolCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"backend", "template"}, nil)
	}
	return &poolCollector{g: g,
		hits:      d("wovyr_pool_hits_total", "Acquires served by a warm sandbox."),
		misses:    d("wovyr_pool_misses_total", "Acquires that had to prepare a sandbox cold."),
		warm:      d("wovyr_pool_warm", "Warm, tenant-neutral sandboxes ready now."),
		live:      d("wovyr_pool_live", "Live sandboxes (warm and in use)."),
		failures:  d("wovyr_pool_create_failures_total", "Sandbox creations that failed."),
		breakers:  d("wovyr_pool_breaker_open", "1 while the pool's create-failure breaker is not closed."),
		restores:  d("wovyr_pool_restores_total", "Sandboxes restored from a golden snapshot instead of prepared cold."),
		fallbacks: d("wovyr_pool_restore_fallbacks_total", "Restores that failed and fell back to a cold prepare on the same backend."),
		stalled: prometheus.NewDesc("wovyr_pool_stalled", "1 while the pool's template cannot be prepared (reason: the error class, field: the template field at fault); it prepares nothing until the template can have changed.",
			[]string{"backend", "template", "reason", "field"}, nil),
		acquire: prometheus.NewDesc("wovyr_pool_acquire_seconds", "Acquire latency, warm (a ready sandbox) or cold (prepared on the spot).",
			[]string{"backend", "template", "path"}, nil),
	}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.hits, c.misses, c.warm, c.live, c.failures, c.breakers, c.restores, c.fallbacks, c.stalled, c.acquire} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, sn := range c.g.Snapshots() {
		l := []string{sn.Key.Backend, sn.Key.Template}
		open := 0.0
		if sn.Breaker != autoscale.Closed {
			open = 1
		}
		ch <- prometheus.MustNewConstMetric(c.hits, prometheus.CounterValue, float64(sn.Hits), l...)
		ch <- prometheus.MustNewConstMetric(c.misses, prometheus.CounterValue, float64(sn.Misses), l...)
		ch <- prometheus.MustNewConstMetric(c.warm, prometheus.GaugeValue, float64(sn.Warm), l...)
		ch <- prometheus.MustNewConstMetric(c.live, prometheus.GaugeValue, float64(sn.Live), l...)
		ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(sn.CreateFailures), l...)
		ch <- prometheus.MustNewConstMetric(c.breakers, prometheus.GaugeValue, open, l...)
		ch <- prometheus.MustNewConstMetric(c.restores, prometheus.CounterValue, float64(sn.Restores), l...)
		ch <- prometheus.MustNewConstMetric(c.fallbacks, prometheus.CounterValue, float64(sn.RestoreFallbacks), l...)
		if st := sn.Stall; st != nil {
			ch <- prometheus.MustNewConstMetric(c.stalled, prometheus.GaugeValue, 1, sn.Key.Backend, sn.Key.Template, string(st.Class()), st.Field())
		} else {
			ch <- prometheus.MustNewConstMetric(c.stalled, prometheus.GaugeValue, 0, sn.Key.Backend, sn.Key.Template, "", "")
		}
		for path, h := range map[string]pool.HistogramSnapshot{"warm": sn.AcquireWarm, "cold": sn.AcquireCold} {
			buckets := make(map[float64]uint64, len(h.Bounds))
			var cum uint64
			for i, b := range h.Bounds {
				cum += h.Counts[i]
				buckets[b.Seconds()] = cum
			}
			ch <- prometheus.MustNewConstHistogram(c.acquire, h.Count, h.Sum.Seconds(), buckets, sn.Key.Backend, sn.Key.Template, path)
		}
	}
}
