package autoscale

import (
	"math"
	"time"
)

// Observation is what the pool saw since the previous Step.
type Observation struct {
	Now      time.Time // the clock value; Step never reads a clock itself
	Arrivals int       // acquires since the previous step
	Misses   int       // of those, acquires that found no warm sandbox
	Warm     int       // warm sandboxes now
	// Creating is how many creates started by earlier steps are still
	// under way: each will be warm, so it counts toward the target.
	Creating int
	// Room is how many more sandboxes the pool may create now without
	// passing its live bound.
	Room int
	// FailStreak is the number of consecutive failed creates (refill or
	// cold); any successful create resets it to zero.
	FailStreak int
}

// BreakerState is the state of the create-failure circuit breaker.
type BreakerState int

// Breaker states.
const (
	Closed   BreakerState = iota // refilling normally
	Open                         // refilling stopped until RetryAt
	HalfOpen                     // one probe create allowed
)

func (b BreakerState) String() string {
	switch b {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return "invalid"
}

// State is what a policy carries from one Step to the next. The zero State
// is the start.
type State struct {
	Last time.Time // Now of the previous step; zero before the first
	Rate float64   // smoothed arrivals per second
	// LastArrival is when an acquire was last seen; after IdleTTL without
	// one the rate is taken to be zero (an average never decays to zero).
	LastArrival time.Time
	Target      int // the current warm target
	// Since is when demand last reached Target; the target is lowered only
	// IdleTTL after it.
	Since   time.Time
	Tokens  float64       // refill token bucket
	Breaker BreakerState  // circuit breaker
	RetryAt time.Time     // when an open breaker goes half-open
	Backoff time.Duration // the current back-off; zero while closed
	// ProbeStreak is FailStreak when the breaker went half-open, so that a
	// failed probe is seen as a longer streak.
	ProbeStreak int
}

// Decision is what the pool should do now.
type Decision struct {
	Target  int // warm sandboxes wanted
	Create  int // creates to start now (≤ Room, rate limited, breaker gated)
	Destroy int // surplus warm sandboxes to destroy now
	Breaker BreakerState
}

// Step is the policy: a pure function of the previous state and the new
// observation. Observations must come in non-decreasing time order; a clock
// that steps back is treated as no time having passed.
func (p Policy) Step(s State, o Observation) (State, Decision) {
	c := p.cfg
	first := s.Last.IsZero()
	var dt float64 // seconds since the previous step
	if !first && o.Now.After(s.Last) {
		dt = o.Now.Sub(s.Last).Seconds()
	}
	if first {
		s.Target = c.Min
		s.Since = o.Now
		s.Tokens = float64(c.RefillBurst)
		s.LastArrival = o.Now
	}
	if o.Arrivals > 0 && o.Now.After(s.LastArrival) {
		s.LastArrival = o.Now
	}
	if dt > 0 || first {
		s.Last = o.Now
	}

	// Arrival rate (EWMA, backward Euler): r += dt/(tau+dt) · (x − r).
	if dt > 0 {
		x := float64(o.Arrivals) / dt
		tau := c.RateTau.Seconds()
		s.Rate += dt / (tau + dt) * (x - s.Rate)
		s.Tokens = math.Min(float64(c.RefillBurst), s.Tokens+dt*c.RefillRate)
	}
	if o.Now.Sub(s.LastArrival) >= c.IdleTTL {
		s.Rate = 0
	}

	// Target: fast up, slow down.
	want := ceil(s.Rate * c.Lead.Seconds())
	if o.Misses > 0 {
		want = max(want, s.Target+o.Misses)
	}
	want = min(max(want, c.Min), c.Max)
	switch {
	case want >= s.Target:
		s.Target, s.Since = want, o.Now
	case o.Now.Sub(s.Since) >= c.IdleTTL:
		s.Target, s.Since = want, o.Now
	}

	s = p.breaker(s, o)

	d := Decision{Target: s.Target, Breaker: s.Breaker}
	if o.Warm > s.Target {
		d.Destroy = o.Warm - s.Target
	}
	n := min(s.Target-o.Warm-o.Creating, o.Room, int(s.Tokens))
	switch s.Breaker {
	case Open:
		n = 0
	case HalfOpen:
		n = min(n, 1)
	}
	if n > 0 {
		d.Create = n
		s.Tokens -= float64(n)
	}
	return s, d
}

// breaker advances the circuit breaker by one observation.
func (p Policy) breaker(s State, o Observation) State {
	b := p.cfg.Breaker
	switch s.Breaker {
	case Closed:
		if o.FailStreak >= b.Threshold {
			s.Breaker, s.Backoff, s.RetryAt = Open, b.Backoff, o.Now.Add(b.Backoff)
		}
	case Open:
		switch {
		case o.FailStreak == 0: // a cold create succeeded meanwhile
			s.Breaker, s.Backoff, s.RetryAt = Closed, 0, time.Time{}
		case !o.Now.Before(s.RetryAt):
			s.Breaker, s.ProbeStreak = HalfOpen, o.FailStreak
		}
	case HalfOpen:
		switch {
		case o.FailStreak == 0:
			s.Breaker, s.Backoff, s.RetryAt, s.ProbeStreak = Closed, 0, time.Time{}, 0
		case o.FailStreak > s.ProbeStreak:
			s.Backoff = min(2*s.Backoff, b.MaxBackoff)
			s.Breaker, s.RetryAt, s.ProbeStreak = Open, o.Now.Add(s.Backoff), 0
		}
	}
	return s
}

// ceil rounds x up, forgiving float noise just above an integer.
func ceil(x float64) int {
	return int(math.Ceil(x - 1e-9))
}
