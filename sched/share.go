package sched

import (
	"math/bits"

	"github.com/wovyr/wovyr/resource"
)

// Charge is what a start costs in the round-robin.
type Charge int

const (
	// ChargePicks charges every start one pick, whatever its demand: plain
	// SWRR over picks.
	ChargePicks Charge = iota
	// ChargeDominantShare charges a start its task's dominant share of the
	// capacity (DRF): max over CPU, memory and GPU of demand/capacity, in
	// ShareUnit steps, at least one step. Every earner earns its weight
	// times the share of the start, so fairness is over weighted dominant
	// shares; with every task of equal demand every start costs the same
	// and the decisions are exactly those of ChargePicks.
	ChargeDominantShare
)

// ShareUnit is the dominant share of a task that takes a whole dimension of
// the capacity (all GPUs, all memory or all CPU). Shares are rounded up to
// whole units, so a task's share is 1..ShareUnit.
const ShareUnit = 1 << 16

// Placer puts GPU tasks on concrete devices (package gpu's Allocator is
// one). The scheduler calls it under its lock, only for a head whose
// demand vector fits and has GPU > 0, and in credit order, so the first
// success is the start. It must be deterministic and must not call back
// into the Scheduler.
type Placer interface {
	// Place assigns free devices to t and names them, or reports false
	// and changes nothing. The caller frees them (after scrubbing) when
	// the task is Done; the scheduler never does.
	Place(t Task) (devices []string, ok bool)
}

// shareOf is the charge of a start of demand d.
func shareOf(mode Charge, d, capacity resource.Vector) int64 {
	if mode == ChargePicks {
		return 1
	}
	s := int64(1)
	for i := range 3 {
		c, v := dimOf(capacity, i), dimOf(d, i)
		if c <= 0 || v <= 0 {
			continue
		}
		// ceil(v × ShareUnit / c) without overflow; v ≤ c (validated).
		hi, lo := bits.Mul64(uint64(v), ShareUnit)
		q, r := bits.Div64(hi, lo, uint64(c))
		if r != 0 {
			q++
		}
		s = max(s, int64(q))
	}
	return s
}
