package cluster

import "slices"

// weighted picks which tenant's queued work a node pulls next: smooth
// weighted round-robin (the rule package sched applies on each node) over
// the tenants that have work waiting in the region's queue. Every node of
// a region applies it to the same queue, so while every tenant has work
// waiting, each node's pulls, and therefore their sum, go to the tenants
// in proportion to their weights, wherever the work was submitted.
//
// A pick is two steps: choose names the winner without changing any
// credit, and charge commits it.
type weighted struct {
	names  []string // sorted: the tie-break
	weight map[string]int64
	credit map[string]int64
}

func newWeighted(weights map[string]int) *weighted {
	w := &weighted{weight: map[string]int64{}, credit: map[string]int64{}}
	for name, v := range weights {
		w.names = append(w.names, name)
		w.weight[name] = int64(max(v, 1))
	}
	slices.Sort(w.names)
	return w
}

// choose returns the earner (has(name) true) with the largest credit once
// every earner has earned its weight; "" if none has work.
func (w *weighted) choose(has func(string) bool) string {
	best, bestCredit := "", int64(0)
	for _, name := range w.names {
		if !has(name) {
			continue
		}
		c := w.credit[name] + w.weight[name]
		if best == "" || c > bestCredit {
			best, bestCredit = name, c
		}
	}
	return best
}

// charge commits a pick of winner among the earners: each earns its
// weight, the winner pays their sum. A tenant without work neither earns
// nor pays.
func (w *weighted) charge(winner string, has func(string) bool) {
	var sum int64
	for _, name := range w.names {
		if has(name) {
			w.credit[name] += w.weight[name]
			sum += w.weight[name]
		}
	}
	w.credit[winner] -= sum
}
