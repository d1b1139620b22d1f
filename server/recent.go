package server

import (
	"math"
	"slices"
	"sync"
	"time"
)

// recentCap is how many finished invocations the dashboard remembers.
const recentCap = 500

// runSummary is one invocation as the dashboard shows it: who, where, how
// it ended and how long each phase took (zero for a phase it never
// reached).
type runSummary struct {
	ID       string        `json:"id"`
	Tenant   string        `json:"tenant"`
	Backend  string        `json:"backend"`
	State    string        `json:"state"`
	Class    string        `json:"class,omitempty"`
	ExitCode int           `json:"exit_code"`
	Accepted time.Time     `json:"accepted"`
	Queue    time.Duration `json:"queue"`
	Prepare  time.Duration `json:"prepare"`
	Run      time.Duration `json:"run"`
	Total    time.Duration `json:"total"`
	admitted bool          // it left the queue: Queue is a real wait
}

// recentRuns is a ring of the last recentCap finished invocations, kept in
// memory for the dashboard: reading them there costs no store scan per
// refresh, and a restart forgets them (the store keeps the records).
type recentRuns struct {
	mu   sync.Mutex
	ring []runSummary
	next int
}

func (r *recentRuns) add(s runSummary) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ring) < recentCap {
		r.ring = append(r.ring, s)
		return
	}
	r.ring[r.next] = s
	r.next = (r.next + 1) % recentCap
}

// list returns the remembered runs, newest first.
func (r *recentRuns) list() []runSummary {
	r.mu.Lock()
	out := append(slices.Clone(r.ring[r.next:]), r.ring[:r.next]...)
	r.mu.Unlock()
	slices.Reverse(out)
	return out
}

// waitQuantiles returns, per tenant, the p50 and p99 queue wait of its
// remembered runs that left the queue, and how many there were. Exact
// over that sample (nearest rank), not a histogram's bucket bound.
func waitQuantiles(runs []runSummary) map[string]waitStats {
	by := map[string][]time.Duration{}
	for _, r := range runs {
		if r.admitted {
			by[r.Tenant] = append(by[r.Tenant], r.Queue)
		}
	}
	out := make(map[string]waitStats, len(by))
	for t, w := range by {
		slices.Sort(w)
		out[t] = waitStats{P50: nearestRank(w, 0.50), P99: nearestRank(w, 0.99), Samples: len(w)}
	}
	return out
}

type waitStats struct {
	P50, P99 time.Duration
	Samples  int
}

// nearestRank is the q-quantile of sorted (non-empty) by nearest rank.
func nearestRank(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
