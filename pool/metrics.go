package pool

import (
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/wovyr/wovyr/autoscale"
)

// Metrics are a pool's counters and latency histograms: plain atomics, so
// the hot path pays a few adds and exporters (Prometheus, wovyr bench) read
// a Snapshot. The zero value is ready to use.
type Metrics struct {
	Hits            atomic.Uint64 // acquires served from the warm set at once
	Misses          atomic.Uint64 // acquires that found it empty
	Creates         atomic.Uint64 // successful factory calls (refill and cold)
	CreateFailures  atomic.Uint64 // failed factory calls
	Destroys        atomic.Uint64 // sandboxes destroyed
	DestroyFailures atomic.Uint64 // of which Destroy returned an error
	Resets          atomic.Uint64 // verified resets that returned a sandbox warm
	ResetFailures   atomic.Uint64 // resets that failed (sandbox destroyed)
	Leaked          atomic.Uint64 // leases reclaimed by the GC safety net
	AcquireErrors   atomic.Uint64 // acquires that returned an error

	Restores         atomic.Uint64 // sandboxes restored from a golden snapshot (of Creates)
	RestoreFallbacks atomic.Uint64 // failed restores that fell back to a cold prepare on the same backend
	Goldens          atomic.Uint64 // golden snapshots obtained (captured or loaded)
	GoldenFailures   atomic.Uint64 // golden snapshots that could not be obtained

	AcquireWarm Histogram // acquire latency when the sandbox was warm
	AcquireCold Histogram // acquire latency including a cold create
}

// Snapshot is a point-in-time copy of a pool's metrics and gauges.
type Snapshot struct {
	Key                                          Key
	Hits, Misses, Creates, CreateFailures        uint64
	Destroys, DestroyFailures                    uint64
	Resets, ResetFailures, Leaked, AcquireErrors uint64
	Restores, RestoreFallbacks                   uint64
	Goldens, GoldenFailures                      uint64
	Warm, Live, InUse, Target                    int
	Breaker                                      autoscale.BreakerState
	Stall                                        *Stall // nil unless stalled
	AcquireWarm, AcquireCold                     HistogramSnapshot
}

// Pool states, as State reports them.
const (
	StateOK       = "ok"                // refilling normally
	StateOpen     = "breaker-open"      // transient create failures: waiting out a back-off
	StateHalfOpen = "breaker-half-open" // one probe create allowed
	StateStalled  = "stalled"           // the template cannot be prepared (see Stall)
)

// State is the pool's refill state: a stall, else the breaker's.
func (s Snapshot) State() string {
	switch {
	case s.Stall != nil:
		return StateStalled
	case s.Breaker == autoscale.Open:
		return StateOpen
	case s.Breaker == autoscale.HalfOpen:
		return StateHalfOpen
	}
	return StateOK
}

// HitRatio is Hits/(Hits+Misses), or 0 before any acquire.
func (s Snapshot) HitRatio() float64 {
	if s.Hits+s.Misses == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Hits+s.Misses)
}

// Snapshot reads the pool's metrics and its current gauges.
func (p *Pool) Snapshot() Snapshot {
	m := p.m
	return Snapshot{
		Key:  p.cfg.Key,
		Hits: m.Hits.Load(), Misses: m.Misses.Load(),
		Creates: m.Creates.Load(), CreateFailures: m.CreateFailures.Load(),
		Destroys: m.Destroys.Load(), DestroyFailures: m.DestroyFailures.Load(),
		Resets: m.Resets.Load(), ResetFailures: m.ResetFailures.Load(),
		Leaked: m.Leaked.Load(), AcquireErrors: m.AcquireErrors.Load(),
		Restores: m.Restores.Load(), RestoreFallbacks: m.RestoreFallbacks.Load(),
		Goldens: m.Goldens.Load(), GoldenFailures: m.GoldenFailures.Load(),
		Warm: len(p.warm), Live: int(p.live.Load()), InUse: int(p.inUse.Load()),
		Target:      int(p.target.Load()),
		Breaker:     autoscale.BreakerState(p.breaker.Load()),
		Stall:       p.stall.Load(),
		AcquireWarm: m.AcquireWarm.Snapshot(),
		AcquireCold: m.AcquireCold.Snapshot(),
	}
}

// histBuckets: bucket i counts durations below 2^i µs; the last also
// takes everything longer (2^25 µs ≈ 34 s and beyond).
const histBuckets = 26

// Histogram counts durations in power-of-two microsecond buckets.
type Histogram struct {
	counts [histBuckets]atomic.Uint64
	sum    atomic.Int64 // nanoseconds
}

// Observe records one duration.
func (h *Histogram) Observe(d time.Duration) {
	i := 0
	if d > 0 {
		i = min(bits.Len64(uint64(d/time.Microsecond)), histBuckets-1)
	}
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

// HistogramSnapshot is a copy of a Histogram. Bounds[i] is the exclusive
// upper bound of Counts[i]; the last bucket is unbounded.
type HistogramSnapshot struct {
	Bounds []time.Duration
	Counts []uint64
	Count  uint64
	Sum    time.Duration
}

// Snapshot copies h.
func (h *Histogram) Snapshot() HistogramSnapshot {
	s := HistogramSnapshot{Bounds: make([]time.Duration, histBuckets), Counts: make([]uint64, histBuckets)}
	for i := range h.counts {
		s.Bounds[i] = time.Duration(1<<i) * time.Microsecond
		s.Counts[i] = h.counts[i].Load()
		s.Count += s.Counts[i]
	}
	s.Sum = time.Duration(h.sum.Load())
	return s
}

// Quantile returns the upper bound of the bucket holding quantile q (0..1),
// or 0 when empty: an over-estimate by at most a factor of two.
func (s HistogramSnapshot) Quantile(q float64) time.Duration {
	if s.Count == 0 {
		return 0
	}
	rank := uint64(q*float64(s.Count-1)) + 1
	var n uint64
	for i, c := range s.Counts {
		n += c
		if n >= rank {
			return s.Bounds[i]
		}
	}
	return s.Bounds[len(s.Bounds)-1]
}
