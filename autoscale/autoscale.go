// Package autoscale decides how many warm sandboxes a pool should keep.
//
// A Policy is a pure function: Step(state, observation) returns the next
// state and a Decision. It reads no clock (the time is part of the
// observation), starts no goroutines, draws no random numbers and keeps no
// hidden state, so the same trace of observations always yields the same
// sequence of targets — which is what its tests assert. The pool's
// Reconcile(ctx, now), called by the server, gathers the observation, calls
// Step and carries out the Decision.
//
// # Why these rules
//
//   - Scale up fast: every miss (an acquire that found no warm sandbox)
//     raises the target by one at the next step, and the arrival rate,
//     smoothed by an exponentially weighted moving average, sets a floor of
//     rate × Lead (Little's law: the sandboxes consumed while a refill is on
//     its way).
//   - Creates under way count toward the target (Observation.Creating):
//     the next step replaces a sandbox claimed while a slow refill runs,
//     and never starts that refill twice.
//   - Scale down slowly: a lower target is adopted only after the demand has
//     stayed below the current target for IdleTTL, so a short lull does not
//     throw away sandboxes that cost a boot to replace.
//   - Refill is rate limited by a token bucket, so a burst of misses cannot
//     turn into a burst of boots that starves the node.
//   - A circuit breaker stops refilling after Breaker.Threshold consecutive
//     create failures and retries one create after a back-off that doubles
//     up to Breaker.MaxBackoff. A broken backend then costs one failed boot
//     per back-off, not one per reconcile.
//
// What it refuses to do: it never creates sandboxes beyond the room the pool
// reports (its live bound) and never chooses a target outside [Min, Max].
package autoscale

import (
	"fmt"
	"math"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// Config is a policy's immutable configuration. Defaults live in
// Config.withDefaults; a zero field takes its default unless noted.
type Config struct {
	// Min and Max bound the warm target. Zero Min keeps no warm sandbox
	// when idle; zero Max means Min (a fixed-size pool) unless Min is zero
	// too, in which case Max is 1.
	Min, Max int
	// RateTau is the time constant of the arrival-rate average. Zero means
	// 10s. The average is the backward-Euler discretisation of a first-order
	// low-pass filter, so it needs only + − × ÷ and stays bit-for-bit
	// deterministic.
	RateTau time.Duration
	// Lead is how long a consumed warm sandbox takes to be replaced (the
	// reconcile period plus a create). The rate term of the target is
	// ceil(rate × Lead). Zero means 1s.
	Lead time.Duration
	// IdleTTL is how long demand must stay below the target before the
	// target is lowered. Zero means 60s.
	IdleTTL time.Duration
	// RefillRate is how many creates per second the refill may start, and
	// RefillBurst how many it may start at once. Zero means 10/s and a burst
	// of Max.
	RefillRate  float64
	RefillBurst int
	// Breaker configures the create-failure circuit breaker.
	Breaker BreakerConfig
}

// BreakerConfig configures the circuit breaker.
type BreakerConfig struct {
	// Threshold is the number of consecutive create failures that opens the
	// breaker. Zero means 5.
	Threshold int
	// Backoff is the first wait before a retry; each failed retry doubles it
	// up to MaxBackoff. Zero means 1s and 1m.
	Backoff, MaxBackoff time.Duration
}

func (c Config) withDefaults() Config {
	if c.Max == 0 {
		c.Max = max(c.Min, 1)
	}
	if c.RateTau == 0 {
		c.RateTau = 10 * time.Second
	}
	if c.Lead == 0 {
		c.Lead = time.Second
	}
	if c.IdleTTL == 0 {
		c.IdleTTL = time.Minute
	}
	if c.RefillRate == 0 {
		c.RefillRate = 10
	}
	if c.RefillBurst == 0 {
		c.RefillBurst = c.Max
	}
	if c.Breaker.Threshold == 0 {
		c.Breaker.Threshold = 5
	}
	if c.Breaker.Backoff == 0 {
		c.Breaker.Backoff = time.Second
	}
	if c.Breaker.MaxBackoff == 0 {
		c.Breaker.MaxBackoff = time.Minute
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Min < 0:
		return sandbox.Errorf(sandbox.BadInput, "autoscale.min", "must not be negative")
	case c.Max < c.Min:
		return sandbox.Errorf(sandbox.BadInput, "autoscale.max", "max %d is below min %d", c.Max, c.Min)
	case c.RateTau < 0, c.Lead < 0, c.IdleTTL < 0:
		return sandbox.Errorf(sandbox.BadInput, "autoscale", "durations must not be negative")
	case c.RefillRate < 0 || math.IsNaN(c.RefillRate) || math.IsInf(c.RefillRate, 0):
		return sandbox.Errorf(sandbox.BadInput, "autoscale.refill_rate", "must be a finite, non-negative rate")
	case c.RefillBurst < 1:
		return sandbox.Errorf(sandbox.BadInput, "autoscale.refill_burst", "must be at least 1")
	case c.Breaker.Threshold < 1:
		return sandbox.Errorf(sandbox.BadInput, "autoscale.breaker.threshold", "must be at least 1")
	case c.Breaker.Backoff <= 0 || c.Breaker.MaxBackoff < c.Breaker.Backoff:
		return sandbox.Errorf(sandbox.BadInput, "autoscale.breaker", "need 0 < backoff <= max backoff")
	}
	return nil
}

// Policy is a validated Config. The zero Policy is not usable; use New.
type Policy struct{ cfg Config }

// New validates cfg and fills in its defaults.
func New(cfg Config) (Policy, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return Policy{}, err
	}
	return Policy{cfg: cfg}, nil
}

// Config returns the configuration with its defaults filled in.
func (p Policy) Config() Config { return p.cfg }

// String describes the policy for logs.
func (p Policy) String() string {
	c := p.cfg
	return fmt.Sprintf("min=%d max=%d tau=%s lead=%s idle=%s refill=%g/s burst=%d breaker=%d/%s..%s",
		c.Min, c.Max, c.RateTau, c.Lead, c.IdleTTL, c.RefillRate, c.RefillBurst,
		c.Breaker.Threshold, c.Breaker.Backoff, c.Breaker.MaxBackoff)
}
