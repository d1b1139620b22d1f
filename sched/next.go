package sched

import (
	"cmp"
	"slices"
	"time"

	"github.com/wovyr/wovyr/resource"
)

// Next starts the next task, if any fits. free is what the caller knows to
// be free right now (pass Free() when the scheduler's capacity is the whole
// story); the scheduler further caps it by Capacity minus what it has handed
// out, and treats negative dimensions as zero. now is the caller's clock,
// used only for Start.Wait. The decision, in order:
//
//  1. Reservations, oldest first: the first whose tenant is under quota and
//     whose head fits starts out of turn, but pays like any pick: every
//     earner (a queued head, under quota) earns its weight times the
//     start's charge and it pays their sum (no turns are counted). A reservation that does not fit
//     sets its demand aside: the rest see free minus it (floored at zero).
//  2. SWRR: every earner earns its weight times the pick's charge; among
//     those with no reservation whose head fits what is left, the largest
//     credit wins (ties: earliest AddTenant) and pays the earners' weight
//     sum times its charge. Credits are compared as if every earner had
//     earned its weight times the smallest head's charge (under
//     ChargePicks: one pick, exactly SWRR). A head that does not fit
//     but whose credit beat the winner's missed its turn; one that missed
//     more than ReserveAfter turns gets a reservation (several at once: in
//     registration order).
//
// "Fits" is the demand vector fitting and, for a GPU task with a Placer,
// the Placer placing it (Start.Devices). When nothing fits, Next returns
// false and changes nothing.
func (s *Scheduler) Next(free resource.Vector, now time.Time) (Start, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	eff := effective(free, s.cfg.Capacity, s.inUse)
	for i, t := range s.reservations {
		if !t.underQuota() {
			continue
		}
		if s.pool.fits(t, eff) {
			s.reservations = slices.Delete(s.reservations, i, i+1)
			s.pool.charge(t)
			t.reserved = false
			return s.start(t, now, true), true
		}
		eff = clip(eff.Sub(t.head.task.Demand))
	}
	w := s.pool.pick(eff)
	if w == nil {
		return Start{}, false
	}
	if len(s.pool.blocked) > 0 {
		s.skip(s.pool.blocked)
	}
	return s.start(w, now, false), true
}

// skip counts a missed turn for each head in blocked and reserves those
// that missed more than ReserveAfter.
func (s *Scheduler) skip(blocked []*tenant) {
	n := 0
	for _, t := range blocked {
		t.head.skips++
		if t.head.skips > s.cfg.ReserveAfter {
			blocked[n] = t
			n++
		}
	}
	if n == 0 {
		return
	}
	reserve := blocked[:n]
	slices.SortFunc(reserve, func(a, b *tenant) int { return cmp.Compare(a.seq, b.seq) })
	for _, t := range reserve {
		t.reserved = true
		s.refresh(t, false) // out of the heaps; it still earns
		s.reservations = append(s.reservations, t)
	}
}

// start pops t's head and hands it out.
func (s *Scheduler) start(t *tenant, now time.Time, reserved bool) Start {
	e := t.head
	s.unlink(e)
	e.running = true
	d := e.task.Demand
	t.running++
	t.inUse = t.inUse.Add(d)
	s.inUse = s.inUse.Add(d)
	wait := max(now.Sub(e.queuedAt), 0)
	t.st.Started++
	t.st.Charged += e.share
	t.st.WaitTotal += wait
	t.st.WaitMax = max(t.st.WaitMax, wait)
	s.refresh(t, t.head != nil && t.head.task.Demand != d)
	devices := s.pool.placed
	s.pool.placed = nil
	return Start{Task: e.task, Wait: wait, Reserved: reserved, Devices: devices}
}
