package server

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/wovyr/wovyr/manager"
	"github.com/wovyr/wovyr/pool"
	"github.com/wovyr/wovyr/sandbox"
)

// warmTarget is a default pool that start-up fills before the daemon
// reports ready.
type warmTarget struct {
	pool *pool.Pool
	min  int
}

// PoolWarmth is one default pool's fill, as /readyz reports it.
type PoolWarmth struct {
	Backend  string `json:"backend"`
	Template string `json:"template"`
	Warm     int    `json:"warm"`
	MinWarm  int    `json:"min_warm"`
}

// prewarm creates the default pool — the backend's natural workload kind
// on the default template, which is what Select routes an invocation that
// names no image to — of every available, certified backend whose sizing
// keeps sandboxes warm. The pool loop fills them; awaitWarm waits.
func (s *Server) prewarm(sts []manager.Status) []warmTarget {
	var ts []warmTarget
	for _, st := range sts {
		b, ok := s.mgr.Backend(st.Name)
		if !ok || !st.Capability.Available || !st.Certified || len(st.Kinds) == 0 {
			continue
		}
		tmpl := sandbox.Template{Kind: st.Kinds[0]}
		size, ok := s.pools.SizeOf(s.keyFor(b, tmpl))
		if !ok || size.Autoscale.Min < 1 {
			continue
		}
		p, err := s.poolFor(b, tmpl)
		if err != nil {
			s.log.Warn("prewarm", "backend", b.Name(), "error", err)
			continue
		}
		ts = append(ts, warmTarget{pool: p, min: size.Autoscale.Min})
	}
	return ts
}

// awaitWarm waits until every target holds its minimum or failed to
// prepare a sandbox (waiting longer would not help: the pool's breaker and
// /readyz tell the operator), WarmTimeout passes or ctx ends, and logs how
// long each took.
func (s *Server) awaitWarm(ctx context.Context, ts []warmTarget) {
	start := time.Now()
	deadline := time.NewTimer(s.cfg.WarmTimeout.D())
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	done := make([]bool, len(ts))
	for left := len(ts); left > 0; {
		for i, t := range ts {
			if done[i] {
				continue
			}
			switch sn := t.pool.Snapshot(); {
			case sn.Warm >= t.min:
				done[i], left = true, left-1
				s.log.Info("pool warm", "pool", t.pool.Key().String(), "warm", t.min, "took_ms", ms(time.Since(start)))
			case sn.CreateFailures > 0:
				done[i], left = true, left-1
				s.log.Warn("pool not warm: its sandboxes fail to prepare", "pool", t.pool.Key().String(), "failures", sn.CreateFailures)
			}
		}
		if left == 0 {
			return
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			s.log.Warn("ready before every pool is warm", "short", s.warmth(false), "waited", s.cfg.WarmTimeout.D())
			return
		case <-ctx.Done():
			return
		}
	}
}

// warmth reports the default pools' fill; only those short of their
// minimum unless all is set.
func (s *Server) warmth(all bool) []PoolWarmth {
	var out []PoolWarmth
	for _, t := range s.warm {
		k, w := t.pool.Key(), t.pool.Snapshot().Warm
		if all || w < t.min {
			out = append(out, PoolWarmth{Backend: k.Backend, Template: k.Template, Warm: w, MinWarm: t.min})
		}
	}
	return out
}

// warmingError is /readyz's answer while start-up fills the pools.
func (s *Server) warmingError() error {
	var parts []string
	for _, w := range s.warmth(false) {
		parts = append(parts, fmt.Sprintf("%s %d/%d", w.Backend, w.Warm, w.MinWarm))
	}
	return sandbox.Errorf(Unavailable, "", "warming the pools: %s warm", strings.Join(parts, ", "))
}
