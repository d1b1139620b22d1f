package sched

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/resource"
)

var roomy = Config{Capacity: resource.Vector{CPUMillis: 1 << 40, MemoryBytes: 1 << 50, GPU: 1 << 20}}

// newImpls returns a fast scheduler and an oracle with the same tenants.
func newImpls(tb testing.TB, cfg Config, names []string, weights []int64) []impl {
	s, o := newPair(tb, cfg)
	for _, im := range []impl{s, o} {
		for i, n := range names {
			if err := im.AddTenant(n, TenantConfig{Weight: weights[i], MaxQueued: 100, MaxRunning: 8}); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return []impl{s, o}
}

// backlogged makes picks with every tenant always backlogged and every task
// fitting: each started task is Done at once and replaced by a new one. It
// returns the tenant of each pick.
func backlogged(tb testing.TB, im impl, names []string, picks int) []string {
	now := time.Unix(0, 0)
	id := 0
	submit := func(tenant string) {
		id++
		if err := im.Submit(Task{ID: fmt.Sprint(id), Tenant: tenant, Demand: resource.Vector{CPUMillis: 100}}, now); err != nil {
			tb.Fatal(err)
		}
	}
	for _, n := range names {
		submit(n)
		submit(n)
	}
	out := make([]string, 0, picks)
	for range picks {
		st, ok := im.Next(im.Free(), now)
		if !ok {
			tb.Fatal("nothing started although every tenant is backlogged")
		}
		if err := im.Done(st.Task.ID); err != nil {
			tb.Fatal(err)
		}
		submit(st.Task.Tenant)
		out = append(out, st.Task.Tenant)
	}
	return out
}

// TestWeights511 pins nginx's sequence: weights {5,1,1} give a a b a c a a
// in every period (ties between b and c go to b, added first).
func TestWeights511(t *testing.T) {
	names := []string{"a", "b", "c"}
	for i, im := range newImpls(t, roomy, names, []int64{5, 1, 1}) {
		got := strings.Join(backlogged(t, im, names, 7*6), "")
		if want := strings.Repeat("aabacaa", 6); got != want {
			t.Errorf("impl %d: got %s, want %s", i, got, want)
		}
	}
}

// TestSWRRInvariants checks, for random weights with every tenant
// backlogged and everything fitting: any W = Σw consecutive picks give
// tenant i exactly w_i picks; no tenant ever gets a pick or more beyond its
// exact share w_i·t/W; credits sum to zero.
func TestSWRRInvariants(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for trial := range scale(1000) {
		n := 1 + r.IntN(16)
		names := make([]string, n)
		weights := make([]int64, n)
		var W int64
		for i := range names {
			names[i] = fmt.Sprintf("t%d", i)
			weights[i] = 1 + r.Int64N(12)
			if trial%2 == 0 {
				weights[i] = []int64{1, 2, 4}[r.IntN(3)]
			}
			W += weights[i]
		}
		for k, im := range newImpls(t, roomy, names, weights) {
			picks := backlogged(t, im, names, int(4*W))
			idx := map[string]int{}
			for i, n := range names {
				idx[n] = i
			}
			// Sliding windows of length W.
			count := make([]int64, n)
			for j, p := range picks {
				count[idx[p]]++
				if j >= int(W) {
					count[idx[picks[j-int(W)]]]--
				}
				if j >= int(W)-1 {
					for i := range names {
						if count[i] != weights[i] {
							t.Fatalf("impl %d weights %v: window ending at pick %d gives %s %d picks, want %d",
								k, weights, j, names[i], count[i], weights[i])
						}
					}
				}
			}
			// Lag: with credit c_i = w_i·t − W·picks_i, SWRR keeps every
			// c_i > −W (the winner holds the largest credit, which is ≥ W/n
			// > 0 after the earning step, and pays W), so no tenant is ever
			// a whole pick ahead of its share w_i·t/W. Behind its share a
			// tenant can be more than a pick: see TestSWRRLagBehind.
			got := make([]int64, n)
			for j, p := range picks {
				got[idx[p]]++
				tt := int64(j + 1)
				for i := range names {
					if ahead := W*got[i] - weights[i]*tt; ahead >= W {
						t.Fatalf("impl %d weights %v: after %d picks %s has %d, share %d/%d: a pick or more ahead",
							k, weights, tt, names[i], got[i], weights[i]*tt, W)
					}
				}
			}
			var sum int64
			for _, st := range im.Snapshot() {
				sum += st.Credit
			}
			if sum != 0 {
				t.Fatalf("impl %d: credits sum to %d, want 0", k, sum)
			}
		}
	}
}

// TestSWRRLagBehind pins a fact about SWRR itself, so that nobody "fixes" the
// scheduler towards a false bound: behind its share, a tenant can lag by
// more than one pick. Weights {1,1,1,11,11} (W=25): after 16 picks the last
// tenant has 6 picks against a share of 16·11/25 = 7.04. An exhaustive search
// over weights ≤ 12 found no such case with 4 tenants or fewer; random
// search with up to 64 tenants found lags up to about 1.3 picks.
func TestSWRRLagBehind(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e"}
	for k, im := range newImpls(t, roomy, names, []int64{1, 1, 1, 11, 11}) {
		picks := backlogged(t, im, names, 16)
		e := int64(strings.Count(strings.Join(picks, ""), "e"))
		if lag := 16*11 - 25*e; e != 6 || lag != 26 {
			t.Fatalf("impl %d: e has %d picks after 16 (%v), want 6 (lag 26/25 picks)", k, e, picks)
		}
	}
}

// TestSWRRLagBehindWhateverTheTies: no way of breaking SWRR's ties keeps
// every tenant within a pick of its share. For {2,15,1,15,5,15,15} (W=68,
// all backlogged, everything fitting) it walks every tie decision of two
// periods and finds the best choice still leaves some tenant 70/68 of a
// pick behind at some point; {1,1,1,11,11} shows that ties can matter
// (23/25 at best, 26/25 with this scheduler's order). A lag bound of one
// pick is therefore not SWRR's to give, with any tie order.
func TestSWRRLagBehindWhateverTheTies(t *testing.T) {
	for _, c := range []struct {
		weights []int64
		best    int64 // W × the smallest achievable largest lag behind
	}{{[]int64{2, 15, 1, 15, 5, 15, 15}, 70}, {[]int64{1, 1, 1, 11, 11}, 23}} {
		var W int64
		for _, w := range c.weights {
			W += w
		}
		if got := bestTieLag(c.weights, 2*int(W)); got != c.best {
			t.Errorf("weights %v: best achievable lag %d/%d picks, want %d/%d", c.weights, got, W, c.best, W)
		}
	}
	// The scheduler itself, on the first set: over a pick behind too.
	names := []string{"a", "b", "c", "d", "e", "f", "g"}
	weights := []int64{2, 15, 1, 15, 5, 15, 15}
	for k, im := range newImpls(t, roomy, names, weights) {
		picks := backlogged(t, im, names, 2*68)
		got := map[string]int64{}
		var worst int64
		for j, p := range picks {
			got[p]++
			for i, n := range names {
				worst = max(worst, weights[i]*int64(j+1)-68*got[n])
			}
		}
		if worst <= 68 {
			t.Errorf("impl %d: largest lag behind %d/68, want over a pick", k, worst)
		}
	}
}

// bestTieLag is, over every way of breaking the ties in the first picks
// picks of SWRR with all tenants backlogged, the smallest achievable
// largest credit, which is W × the largest lag behind (credit c_i =
// w_i·t − W·picks_i).
func bestTieLag(weights []int64, picks int) int64 {
	var W int64
	for _, w := range weights {
		W += w
	}
	memo := map[string]int64{}
	var walk func(credit []int64, t int) int64
	walk = func(credit []int64, t int) int64 {
		if t == picks {
			return 0
		}
		key := fmt.Sprint(t, credit)
		if v, ok := memo[key]; ok {
			return v
		}
		earned := make([]int64, len(credit))
		var top int64 = -1 << 62
		for i := range credit {
			earned[i] = credit[i] + weights[i]
			top = max(top, earned[i])
		}
		best := int64(1 << 62)
		for k := range earned {
			if earned[k] != top {
				continue
			}
			next := append([]int64(nil), earned...)
			next[k] -= W
			worst := walk(next, t+1)
			for _, c := range next {
				worst = max(worst, c)
			}
			best = min(best, worst)
		}
		memo[key] = best
		return best
	}
	return walk(make([]int64, len(weights)), 0)
}
