package sched

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// lagExtremes runs one SWRR period (W picks) of backlogged tenants on the
// fast scheduler and returns W × the largest lag behind and ahead of the
// fluid share (credit c_i = w_i·t − W·picks_i after pick t).
func lagExtremes(tb testing.TB, weights []int64) (behind, ahead, W int64) {
	names := make([]string, len(weights))
	for i := range names {
		names[i] = fmt.Sprintf("t%d", i)
		W += weights[i]
	}
	im := newImpls(tb, roomy, names, weights)[0]
	picks := map[string]int64{}
	for t, p := range backlogged(tb, im, names, int(W)) {
		picks[p]++
		for i, n := range names {
			c := weights[i]*int64(t+1) - W*picks[n]
			behind, ahead = max(behind, c), max(ahead, -c)
		}
	}
	return behind, ahead, W
}

// TestSWRRBound is the bound sched/doc.go states, over random weights: no
// tenant is ever a whole pick ahead of its share (lag > −1, proven) nor
// n−1 picks behind (proven), on the fast scheduler.
func TestSWRRBound(t *testing.T) {
	r := rand.New(rand.NewPCG(18, 26))
	for range scale(200) {
		n := 2 + r.IntN(30)
		weights := make([]int64, n)
		for i := range weights {
			weights[i] = 1 + r.Int64N([]int64{3, 20, 100}[r.IntN(3)])
		}
		behind, ahead, W := lagExtremes(t, weights)
		if ahead >= W || behind >= int64(n-1)*W {
			t.Fatalf("weights %v: lag ahead %d/%d, behind %d/%d picks: outside (−1, %d)", weights, ahead, W, behind, W, n-1)
		}
	}
}

// TestSWRRBoundExhaustive repeats, on the fast scheduler, the exhaustive
// search sched/doc.go quotes for up to four tenants of weights 1..8 (every
// registration order): the worst lag ahead is (n−1)/n of a pick and the
// worst behind is the tabulated fraction.
func TestSWRRBoundExhaustive(t *testing.T) {
	const m = 8
	for _, c := range []struct {
		n                 int
		behind, behindW   int64
		weightsAtTheWorst string
	}{{2, 1, 2, "[1 1]"}, {3, 12, 15, "[1 7 7]"}, {4, 15, 16, "[1 1 7 7]"}} {
		if testing.Short() && c.n == 4 {
			continue
		}
		weights := make([]int64, c.n)
		for i := range weights {
			weights[i] = 1
		}
		var bn, bw, an, aw int64 = 0, 1, 0, 1
		var at string
		for {
			behind, ahead, W := lagExtremes(t, weights)
			if behind*bw > bn*W {
				bn, bw, at = behind, W, fmt.Sprint(weights)
			}
			if ahead*aw > an*W {
				an, aw = ahead, W
			}
			i := 0
			for i < c.n && weights[i] == m {
				weights[i] = 1
				i++
			}
			if i == c.n {
				break
			}
			weights[i]++
		}
		if bn*c.behindW != c.behind*bw || at != c.weightsAtTheWorst || an*int64(c.n) != int64(c.n-1)*aw {
			t.Errorf("n=%d: worst behind %d/%d at %s, ahead %d/%d; want %d/%d at %s, ahead %d/%d",
				c.n, bn, bw, at, an, aw, c.behind, c.behindW, c.weightsAtTheWorst, c.n-1, c.n)
		}
	}
}
