package sched

import "github.com/wovyr/wovyr/resource"

// pool holds the earners — tenants with a queued head, under their
// concurrency quota — and is the fast form of SWRR. Those without a
// reservation sit in the class heaps and may be picked; reserved ones earn
// outside them (outside).
//
// # Why weight classes
//
// Every pick adds w_i to the credit of every earner, so the credits cannot
// be kept literally. The pool keeps a virtual pick counter T and, per
// tenant, base_i = credit_i − w_i·T: "everyone earns" is then T++ and costs
// nothing. The order of base_i equals the order of credit_i only among
// tenants of equal weight, so tenants are grouped in one heap per distinct
// weight (a class), ordered by (base desc, registration order). A pick
// compares the top of each class by its real credit, base + w·T, and
// charges the winner the earners' weight sum. That is exact SWRR with the
// oracle's tie-break, at O(D + log n) for D distinct weights.
//
// A head that does not fit must not be picked, but it still earns. When the
// best class top does not fit, a best-first search over the class heaps
// walks down from the tops in credit order until a head fits; the ones
// passed on the way are exactly those that missed their turn (their credit
// beat the winner's), each a step toward a reservation, so this work is
// bounded per task. Three min-heaps of head demand (one per dimension) see
// in O(1) that nothing can fit at all.
type pool struct {
	t        int64            // virtual pick counter
	rebaseAt int64            // when t reaches it, fold t into every base
	classes  map[int64]*class // by weight; looked up, never iterated
	active   []*class         // classes with at least one tenant, any order
	tops     []ctop           // active[k]'s top, kept here so a pick scans one array
	n        int              // tenants in the class heaps
	wsum     int64            // total weight of the earners, in the heaps or not
	outside  []*tenant        // earners outside the heaps: reserved, any order
	dims     [dims]dimHeap    // negated head demand per dimension, then share: the smallest on top
	placer   Placer           // nil: the vector is the whole story
	placed   []string         // devices the placer gave the winner of this Next

	frontier []fitem   // scratch: the best-first search of a pick
	blocked  []*tenant // scratch: the tenants that missed their turn in this pick
}

// ctop is a copy of a class's top item.
type ctop struct {
	base, seq, weight int64
}

// class is the tenants of one weight, ordered by credit.
type class struct {
	weight int64
	h      classHeap
	pos    int // index in pool.active, or -1
}

// dims is the number of head heaps: one per resource dimension and one
// for the head's charge.
const dims = 4

func newPool(placer Placer) pool {
	return pool{
		rebaseAt: rebaseAt,
		classes:  make(map[int64]*class),
		dims:     [dims]dimHeap{{dim: 0}, {dim: 1}, {dim: 2}, {dim: 3}},
		placer:   placer,
	}
}

// keyOf is head e's key in dims[i].
func keyOf(e *entry, i int) int64 {
	if i == 3 {
		return -e.share
	}
	return -dimOf(e.task.Demand, i)
}

func dimOf(v resource.Vector, d int) int64 {
	switch d {
	case 0:
		return v.CPUMillis
	case 1:
		return v.MemoryBytes
	}
	return v.GPU
}

func (p *pool) classOf(w int64) *class {
	c := p.classes[w]
	if c == nil {
		c = &class{weight: w, pos: -1}
		p.classes[w] = c
	}
	return c
}

// attach puts an item into its class heap, activating the class.
func (p *pool) attach(c *class, it citem) {
	c.h.push(it)
	if c.pos < 0 {
		c.pos = len(p.active)
		p.active = append(p.active, c)
		p.tops = append(p.tops, ctop{})
	}
	p.retop(c)
}

// retop copies c's top into p.tops after the top may have changed.
func (p *pool) retop(c *class) {
	top := &c.h[0]
	p.tops[c.pos] = ctop{base: top.base, seq: top.seq, weight: c.weight}
}

// detach takes t's item out of its class heap, deactivating an emptied class.
func (p *pool) detach(t *tenant) citem {
	c := t.cls
	it := c.h.remove(t.clsPos)
	if len(c.h) == 0 {
		last := p.active[len(p.active)-1]
		p.active[c.pos] = last
		last.pos = c.pos
		p.active = p.active[:len(p.active)-1]
		p.tops[last.pos] = p.tops[len(p.tops)-1]
		p.tops = p.tops[:len(p.tops)-1]
		c.pos = -1
	} else {
		p.retop(c)
	}
	return it
}

// add makes t an earner with its frozen credit: in the class heaps when
// it may be picked (heap), outside them when it holds a reservation.
func (p *pool) add(t *tenant, heap bool) {
	w := t.cfg.Weight
	base := t.credit - w*p.t
	if heap {
		c := p.classOf(w)
		t.cls = c
		p.attach(c, citem{base: base, seq: t.seq, t: t})
		for i := range p.dims {
			p.dims[i].push(keyOf(t.head, i), t)
		}
		p.n++
		t.inPool = true
	} else {
		t.base = base
		t.outPos = len(p.outside)
		p.outside = append(p.outside, t)
	}
	p.wsum += w
	t.earning = true
}

// remove freezes t's credit and takes it out of the earners.
func (p *pool) remove(t *tenant) {
	w := t.cfg.Weight
	if t.inPool {
		it := p.detach(t)
		t.credit = it.base + w*p.t
		for i := range p.dims {
			p.dims[i].remove(t)
		}
		p.n--
		t.cls = nil
		t.inPool = false
	} else {
		t.credit = t.base + w*p.t
		last := p.outside[len(p.outside)-1]
		p.outside[t.outPos] = last
		last.outPos = t.outPos
		p.outside = p.outside[:len(p.outside)-1]
	}
	p.wsum -= w
	t.earning = false
}

// headChanged re-keys t after its head task changed.
func (p *pool) headChanged(t *tenant) {
	for i := range p.dims {
		p.dims[i].setKey(t, keyOf(t.head, i))
	}
}

// credit is t's current SWRR credit, earning or frozen.
func (p *pool) credit(t *tenant) int64 {
	switch {
	case t.inPool:
		return t.cls.h[t.clsPos].base + t.cls.weight*p.t
	case t.earning:
		return t.base + t.cfg.Weight*p.t
	}
	return t.credit
}

// noneFits reports, in O(1), that some dimension's smallest head demand
// exceeds eff, so no head fits. (False does not promise that one fits.)
func (p *pool) noneFits(eff resource.Vector) bool {
	for i := range 3 { // the resource dimensions, not the charges
		if h := &p.dims[i]; len(h.items) > 0 && -h.top() > dimOf(eff, i) {
			return true
		}
	}
	return p.n == 0
}

// pick performs one SWRR pick among the heap tenants whose head fits eff.
// Every earner earns its weight times the winner's charge; the winner, the
// largest credit among those that fit, pays the earners' weight sum times
// its charge. Credits are compared at the counter plus the smallest head
// charge x (one under ChargePicks): the earning of this pick is not known
// before its winner is, and x is the charge of every pick whenever all
// heads cost the same, which keeps unit-demand picks exactly SWRR. It returns the winner, or
// nil when none fits (and then changes nothing), and leaves in p.blocked
// the tenants that missed their turn: their head did not fit and their
// credit beat the winner's.
//
// The usual case is one comparison per class: the best class top fits.
// Otherwise a best-first search over the class heaps visits tenants in
// credit order until one fits: those that missed their turn and their
// children, never the tenants below the winner.
func (p *pool) pick(eff resource.Vector) *tenant {
	if p.t >= p.rebaseAt {
		p.rebase()
	}
	p.blocked = p.blocked[:0]
	if p.noneFits(eff) {
		return nil
	}
	t1 := p.t - p.dims[3].top() // credits are compared after this pick's earning, at the smallest charge
	best := 0
	bestCredit := p.tops[0].base + p.tops[0].weight*t1
	for k := 1; k < len(p.tops); k++ {
		top := &p.tops[k]
		cr := top.base + top.weight*t1
		if cr > bestCredit || cr == bestCredit && top.seq < p.tops[best].seq {
			best, bestCredit = k, cr
		}
	}
	c, i := p.active[best], 0
	if !p.fits(c.h[0].t, eff) {
		if c, i = p.search(eff, t1); c == nil {
			p.blocked = p.blocked[:0]
			return nil
		}
	}
	it := &c.h[i]
	winner := it.t
	share := winner.head.share
	p.t += share
	it.base -= p.wsum * share
	c.h.down(i)
	p.retop(c)
	return winner
}

// fitem is a class heap node in the best-first search.
type fitem struct {
	credit int64
	seq    int64
	c      *class
	i      int
}

func (a *fitem) above(b *fitem) bool {
	return a.credit > b.credit || a.credit == b.credit && a.seq < b.seq
}

// search finds the heap tenant of largest credit (at counter t1) whose head
// fits eff and collects the ones above it in p.blocked. It returns the
// winner's class and index, or nil when no head fits.
func (p *pool) search(eff resource.Vector, t1 int64) (*class, int) {
	f := p.frontier[:0]
	defer func() { p.frontier = f[:0] }()
	push := func(c *class, i int) {
		it := &c.h[i]
		f = append(f, fitem{it.base + c.weight*t1, it.seq, c, i})
		for j := len(f) - 1; j > 0; {
			up := (j - 1) / 2
			if !f[j].above(&f[up]) {
				break
			}
			f[j], f[up] = f[up], f[j]
			j = up
		}
	}
	for _, c := range p.active {
		push(c, 0)
	}
	for len(f) > 0 {
		top := f[0]
		last := len(f) - 1
		f[0] = f[last]
		f = f[:last]
		for j := 0; ; {
			m := 2*j + 1
			if m >= len(f) {
				break
			}
			if r := m + 1; r < len(f) && f[r].above(&f[m]) {
				m = r
			}
			if !f[m].above(&f[j]) {
				break
			}
			f[j], f[m] = f[m], f[j]
			j = m
		}
		c, i := top.c, top.i
		t := c.h[i].t
		if p.fits(t, eff) {
			return c, i
		}
		p.blocked = append(p.blocked, t)
		for k := arity*i + 1; k <= arity*i+arity && k < len(c.h); k++ {
			push(c, k)
		}
	}
	return nil, 0
}

// charge is the SWRR step of a forced pick: r, a reserved earner outside
// the heaps, starts out of turn. Every earner earns its weight and r pays
// their sum. No turns are counted for a forced pick.
func (p *pool) charge(r *tenant) {
	if p.t >= p.rebaseAt {
		p.rebase()
	}
	share := r.head.share
	p.t += share
	r.base -= p.wsum * share
}

// fits says t's head fits eff and, for a GPU task with a placer, has been
// placed (the devices wait in p.placed for the start).
func (p *pool) fits(t *tenant, eff resource.Vector) bool {
	task := &t.head.task
	if !task.Demand.Fits(eff) {
		return false
	}
	if p.placer == nil || task.Demand.GPU == 0 {
		return true
	}
	devices, ok := p.placer.Place(*task)
	if ok {
		p.placed = devices
	}
	return ok
}

// rebase folds the virtual counter into every base; orders are unchanged.
func (p *pool) rebase() {
	for _, c := range p.active {
		for i := range c.h {
			c.h[i].base += c.weight * p.t
		}
		p.retop(c)
	}
	for _, t := range p.outside {
		t.base += t.cfg.Weight * p.t
	}
	p.t = 0
}
