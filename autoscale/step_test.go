package autoscale

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// step is one line of a synthetic trace: at seconds after t0 the pool
// observed o (Now is filled in) and the policy must decide want.
type step struct {
	at   float64
	o    Observation
	want Decision
}

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

func runTrace(t *testing.T, cfg Config, trace []step) {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var s State
	for i, st := range trace {
		o := st.o
		o.Now = at(st.at)
		var d Decision
		s, d = p.Step(s, o)
		if d != st.want {
			t.Fatalf("step %d (t=%gs, %+v): got %+v, want %+v (state %+v)", i, st.at, st.o, d, st.want, s)
		}
	}
}

func TestStepTraces(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		trace []step
	}{{
		// Misses raise the target by their count at once (clamped to Max);
		// it falls back to Min only IdleTTL after demand last reached it.
		name: "misses scale up, idle TTL scales down",
		cfg:  Config{Min: 1, Max: 4, RateTau: time.Second, Lead: time.Millisecond, IdleTTL: 10 * time.Second, RefillRate: 100, RefillBurst: 4},
		trace: []step{
			{0, Observation{Room: 8}, Decision{Target: 1, Create: 1}},
			{1, Observation{Arrivals: 2, Misses: 2, Room: 8}, Decision{Target: 3, Create: 3}},
			{2, Observation{Arrivals: 5, Misses: 3, Room: 8}, Decision{Target: 4, Create: 4}},
			{3, Observation{Warm: 4, Room: 4}, Decision{Target: 4}},
			{11.5, Observation{Warm: 4, Room: 4}, Decision{Target: 4}},
			{12, Observation{Warm: 4, Room: 4}, Decision{Target: 1, Destroy: 3}},
			{14, Observation{Warm: 1, Room: 7}, Decision{Target: 1}},
		},
	}, {
		// Creates under way count toward the target: a claim taken while
		// they run is replaced by one more, and no decision repeats them.
		name: "creates under way",
		cfg:  Config{Min: 2, Max: 4, RateTau: time.Second, Lead: time.Millisecond, IdleTTL: 10 * time.Second, RefillRate: 100, RefillBurst: 4},
		trace: []step{
			{0, Observation{Room: 8}, Decision{Target: 2, Create: 2}},
			{0.1, Observation{Creating: 2, Room: 6}, Decision{Target: 2}},
			{0.2, Observation{Arrivals: 1, Warm: 1, Creating: 1, Room: 6}, Decision{Target: 2}},
			{0.3, Observation{Arrivals: 1, Creating: 1, Room: 6}, Decision{Target: 2, Create: 1}},
			{0.4, Observation{Creating: 2, Room: 5}, Decision{Target: 2}},
		},
	}, {
		// The EWMA of the arrival rate times Lead sets the target; after
		// IdleTTL without arrivals the rate counts as zero.
		name: "arrival rate EWMA",
		cfg:  Config{Min: 0, Max: 10, RateTau: time.Second, Lead: 2 * time.Second, IdleTTL: 5 * time.Second, RefillRate: 100, RefillBurst: 10},
		trace: []step{
			{0, Observation{Room: 20}, Decision{}},
			{1, Observation{Arrivals: 4, Room: 20}, Decision{Target: 4, Create: 4}},          // rate 2/s
			{2, Observation{Arrivals: 4, Warm: 3, Room: 17}, Decision{Target: 6, Create: 3}}, // rate 3/s
			{3, Observation{Warm: 6, Room: 14}, Decision{Target: 6}},                         // rate 1.5/s: want 3, held
			{5, Observation{Warm: 6, Room: 14}, Decision{Target: 6}},                         // rate 0.5/s: want 1, held
			{7, Observation{Warm: 6, Room: 14}, Decision{Target: 0, Destroy: 6}},             // idle 5s: rate 0
			{8, Observation{Arrivals: 1, Misses: 1, Room: 20}, Decision{Target: 1, Create: 1}},
		},
	}, {
		// A token bucket (2/s, burst 3) limits creates; Room caps them too.
		name: "refill rate limit and room",
		cfg:  Config{Min: 5, Max: 5, RefillRate: 2, RefillBurst: 3},
		trace: []step{
			{0, Observation{Room: 10}, Decision{Target: 5, Create: 3}},
			{0.5, Observation{Warm: 3, Room: 7}, Decision{Target: 5, Create: 1}},
			{1, Observation{Warm: 4, Room: 6}, Decision{Target: 5, Create: 1}},
			{1.25, Observation{Arrivals: 1, Warm: 4, Room: 5}, Decision{Target: 5}}, // 0.5 tokens
			{1.75, Observation{Warm: 4, Room: 5}, Decision{Target: 5, Create: 1}},
			{2, Observation{Warm: 3}, Decision{Target: 5}}, // no room; tokens kept
			{2.5, Observation{Warm: 3, Room: 5}, Decision{Target: 5, Create: 2}},
		},
	}, {
		// Three consecutive failures open the breaker; retries come after
		// 1s, 2s, 4s, 4s; a successful probe closes it.
		name: "breaker opens, backs off, recovers",
		cfg:  Config{Min: 2, Max: 2, RefillRate: 100, RefillBurst: 2, Breaker: BreakerConfig{Threshold: 3, Backoff: time.Second, MaxBackoff: 4 * time.Second}},
		trace: []step{
			{0, Observation{Room: 4}, Decision{Target: 2, Create: 2}},
			{1, Observation{FailStreak: 2, Room: 4}, Decision{Target: 2, Create: 2}},
			{2, Observation{FailStreak: 4, Room: 4}, Decision{Target: 2, Breaker: Open}},
			{2.5, Observation{FailStreak: 4, Room: 4}, Decision{Target: 2, Breaker: Open}},
			{3, Observation{FailStreak: 4, Room: 4}, Decision{Target: 2, Create: 1, Breaker: HalfOpen}},
			{3.5, Observation{FailStreak: 4, Room: 4}, Decision{Target: 2, Create: 1, Breaker: HalfOpen}}, // probe not yet tried
			{4, Observation{FailStreak: 5, Room: 4}, Decision{Target: 2, Breaker: Open}},
			{5.9, Observation{FailStreak: 5, Room: 4}, Decision{Target: 2, Breaker: Open}},
			{6, Observation{FailStreak: 5, Room: 4}, Decision{Target: 2, Create: 1, Breaker: HalfOpen}},
			{7, Observation{FailStreak: 6, Room: 4}, Decision{Target: 2, Breaker: Open}},
			{11, Observation{FailStreak: 6, Room: 4}, Decision{Target: 2, Create: 1, Breaker: HalfOpen}},
			{12, Observation{FailStreak: 7, Room: 4}, Decision{Target: 2, Breaker: Open}},
			{15.9, Observation{FailStreak: 7, Room: 4}, Decision{Target: 2, Breaker: Open}},
			{16, Observation{FailStreak: 7, Room: 4}, Decision{Target: 2, Create: 1, Breaker: HalfOpen}},
			{17, Observation{Warm: 1, Room: 3}, Decision{Target: 2, Create: 1}},
			// A new streak starts from the first back-off again.
			{18, Observation{FailStreak: 3, Warm: 1, Room: 3}, Decision{Target: 2, Breaker: Open}},
			{19, Observation{FailStreak: 3, Warm: 1, Room: 3}, Decision{Target: 2, Create: 1, Breaker: HalfOpen}},
		},
	}, {
		// A cold create that succeeds while the breaker is open closes it.
		name: "cold success closes an open breaker",
		cfg:  Config{Min: 1, Max: 1, RefillRate: 100, Breaker: BreakerConfig{Threshold: 1, Backoff: time.Hour, MaxBackoff: time.Hour}},
		trace: []step{
			{0, Observation{FailStreak: 1, Room: 2}, Decision{Target: 1, Breaker: Open}},
			{1, Observation{FailStreak: 2, Room: 2}, Decision{Target: 1, Breaker: Open}},
			{2, Observation{Arrivals: 1, Misses: 1, Room: 1}, Decision{Target: 1, Create: 1}},
		},
	}, {
		// A clock that steps back counts as no time passing.
		name: "clock steps back",
		cfg:  Config{Min: 0, Max: 3, RefillRate: 1, RefillBurst: 1, IdleTTL: 10 * time.Second},
		trace: []step{
			{10, Observation{Room: 3}, Decision{}},
			{9, Observation{Arrivals: 1, Misses: 1, Room: 3}, Decision{Target: 1, Create: 1}},
			{9.5, Observation{Arrivals: 1, Misses: 1, Room: 2}, Decision{Target: 2}}, // no tokens yet
			{11, Observation{Room: 2}, Decision{Target: 2, Create: 1}},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runTrace(t, tt.cfg, tt.trace) })
	}
}

// TestStepInvariants drives random traces and checks what must hold for any
// input: the target stays in [Min, Max], creates never pass Room, the gap to
// the target or the breaker's allowance, and the same trace gives the same
// decisions twice.
func TestStepInvariants(t *testing.T) {
	p, err := New(Config{Min: 1, Max: 6, RateTau: 2 * time.Second, Lead: 500 * time.Millisecond,
		IdleTTL: 3 * time.Second, RefillRate: 3, RefillBurst: 2, Breaker: BreakerConfig{Threshold: 2}})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	var trace []Observation
	now := t0
	for range 5000 {
		now = now.Add(time.Duration(r.IntN(2000)) * time.Millisecond)
		a := r.IntN(6)
		trace = append(trace, Observation{Now: now, Arrivals: a, Misses: r.IntN(a + 1), Warm: r.IntN(8), Creating: r.IntN(3), Room: r.IntN(5), FailStreak: r.IntN(4)})
	}
	run := func() []Decision {
		var s State
		var out []Decision
		for _, o := range trace {
			var d Decision
			s, d = p.Step(s, o)
			out = append(out, d)
			if d.Target < 1 || d.Target > 6 {
				t.Fatalf("target %d outside [1,6]", d.Target)
			}
			if d.Create > o.Room || d.Create > max(0, d.Target-o.Warm-o.Creating) || d.Create < 0 {
				t.Fatalf("create %d with room %d, warm %d, %d under way, target %d", d.Create, o.Room, o.Warm, o.Creating, d.Target)
			}
			if d.Breaker == Open && d.Create != 0 || d.Breaker == HalfOpen && d.Create > 1 {
				t.Fatalf("breaker %s allowed %d creates", d.Breaker, d.Create)
			}
			if d.Destroy != max(0, o.Warm-d.Target) {
				t.Fatalf("destroy %d with warm %d, target %d", d.Destroy, o.Warm, d.Target)
			}
		}
		return out
	}
	a, b := run(), run()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("step %d differs between identical runs: %+v vs %+v", i, a[i], b[i])
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	bad := map[string]Config{
		"negative min":   {Min: -1},
		"max below min":  {Min: 3, Max: 2},
		"negative ttl":   {IdleTTL: -time.Second},
		"negative rate":  {RefillRate: -1},
		"negative burst": {RefillBurst: -1},
		"threshold":      {Breaker: BreakerConfig{Threshold: -1}},
		"backoff order":  {Breaker: BreakerConfig{Backoff: time.Minute, MaxBackoff: time.Second}},
	}
	for name, cfg := range bad {
		if _, err := New(cfg); !errors.Is(err, sandbox.BadInput) {
			t.Errorf("%s: got %v, want a bad-input error", name, err)
		}
	}
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if c := p.Config(); c.Min != 0 || c.Max != 1 || c.RefillBurst != 1 || c.Breaker.Threshold != 5 {
		t.Fatalf("defaults: %+v", c)
	}
}
