package sched

import "github.com/wovyr/wovyr/resource"

// pool holds the tenants that may be picked: a queued head task, no
// reservation, under their concurrency quota. It is the fast form of SWRR.
//
// # Why weight classes
//
// Every pick adds w_i to the credit of every eligible tenant, so the
// credits cannot be kept literally. The pool keeps a virtual pick counter T
// and, per tenant, base_i = credit_i − w_i·T: "everyone earns" is then T++
// and costs nothing. The order of base_i equals the order of credit_i only
// among tenants of equal weight, so tenants are grouped in one heap per
// distinct weight (a class), ordered by (base desc, registration order). A
// pick compares the top of each class by its real credit, base + w·T, and
// charges the winner the eligible weight sum. That is exact SWRR with the
// oracle's tie-break, at O(D + log n) for D distinct weights among eligible
// tenants.
//
// Heads that do not fit the free vector must neither be picked nor earn in
// that pick. Three max-heaps of head demand (one per dimension) enumerate
// exactly those heads in O(1 + their number); they are lifted out of their
// class for the pick and put back with base −= w, so their credit is
// unchanged. Each such skip moves the head task toward a reservation (after
// ReserveAfter+1 skips it leaves the pool), so this work is bounded per task.
type pool struct {
	t        int64            // virtual pick counter
	rebaseAt int64            // when t reaches it, fold t into every base
	classes  map[int64]*class // by weight; looked up, never iterated
	active   []*class         // classes with at least one tenant, any order
	n        int              // tenants in the pool
	wsum     int64            // their total weight
	dims     [6]dimHeap       // 0..2: head demand per dimension; 3..5: its negation (min-heaps)

	stamp    uint64    // marks the tenants found blocked in this pick
	stack    []int     // scratch for dimHeap.above
	blocked  []*tenant // scratch: this pick's blocked tenants
	detached []citem   // scratch: their class items while lifted out
}

// class is the tenants of one weight, ordered by credit.
type class struct {
	weight int64
	h      classHeap
	pos    int // index in pool.active, or -1
}

func newPool() pool {
	return pool{
		rebaseAt: rebaseAt,
		classes:  make(map[int64]*class),
		dims:     [6]dimHeap{{dim: 0}, {dim: 1}, {dim: 2}, {dim: 3}, {dim: 4}, {dim: 5}},
	}
}

// keyOf is tenant head demand d's key in dims[i].
func keyOf(d resource.Vector, i int) int64 {
	if i >= 3 {
		return -dimOf(d, i-3)
	}
	return dimOf(d, i)
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
	}
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
		c.pos = -1
	}
	return it
}

// add makes t eligible with its frozen credit.
func (p *pool) add(t *tenant) {
	c := p.classOf(t.cfg.Weight)
	t.cls = c
	p.attach(c, citem{base: t.credit - c.weight*p.t, seq: t.seq, t: t})
	d := t.head.task.Demand
	for i := range p.dims {
		p.dims[i].push(keyOf(d, i), t)
	}
	p.n++
	p.wsum += c.weight
	t.inPool = true
}

// remove makes t ineligible, freezing its credit.
func (p *pool) remove(t *tenant) {
	it := p.detach(t)
	t.credit = it.base + t.cls.weight*p.t
	for i := range p.dims {
		p.dims[i].remove(t)
	}
	p.n--
	p.wsum -= t.cls.weight
	t.cls = nil
	t.inPool = false
}

// headChanged re-keys t after its head task changed.
func (p *pool) headChanged(t *tenant) {
	d := t.head.task.Demand
	for i := range p.dims {
		p.dims[i].setKey(t, keyOf(d, i))
	}
}

// credit is t's current SWRR credit, in or out of the pool.
func (p *pool) credit(t *tenant) int64 {
	if !t.inPool {
		return t.credit
	}
	return t.cls.h[t.clsPos].base + t.cls.weight*p.t
}

// noneFits reports, in O(1), that some dimension's smallest head demand
// exceeds eff, so no head fits. (False does not promise that one fits.)
func (p *pool) noneFits(eff resource.Vector) bool {
	for i := range 3 {
		if h := &p.dims[3+i]; len(h.items) > 0 && -h.top() > dimOf(eff, i) {
			return true
		}
	}
	return p.n == 0
}

// findBlocked collects into p.blocked the pool tenants whose head does not
// fit eff.
func (p *pool) findBlocked(eff resource.Vector) {
	p.blocked = p.blocked[:0]
	if p.dims[0].top() <= eff.CPUMillis && p.dims[1].top() <= eff.MemoryBytes && p.dims[2].top() <= eff.GPU {
		return
	}
	p.stamp++
	for i := range 3 {
		p.stack = p.dims[i].above(dimOf(eff, i), p.stack, func(t *tenant) {
			if t.mark != p.stamp {
				t.mark = p.stamp
				p.blocked = append(p.blocked, t)
			}
		})
	}
}

// pick performs one SWRR pick among the tenants whose head fits eff. It
// returns the winner (still in the pool, already charged) or nil when none
// fits, and leaves the blocked tenants of this pick in p.blocked. A pick
// that finds no winner changes no credit.
func (p *pool) pick(eff resource.Vector) *tenant {
	if p.t >= p.rebaseAt {
		p.rebase()
	}
	p.blocked = p.blocked[:0]
	if p.noneFits(eff) {
		return nil
	}
	p.findBlocked(eff)
	if p.n == len(p.blocked) {
		return nil
	}
	we := p.wsum
	p.detached = p.detached[:0]
	for _, t := range p.blocked {
		we -= t.cls.weight
		p.detached = append(p.detached, p.detach(t))
	}
	p.t++
	var best *class
	var bestCredit int64
	for _, c := range p.active {
		top := &c.h[0]
		cr := top.base + c.weight*p.t
		if best == nil || cr > bestCredit || cr == bestCredit && top.seq < best.h[0].seq {
			best, bestCredit = c, cr
		}
	}
	winner := best.h[0].t
	best.h[0].base -= we
	best.h.down(0)
	p.reattach()
	return winner
}

// charge is the SWRR step of a forced pick: r, a reserved tenant outside
// the pool, starts out of turn. The pool tenants whose head fits eff earn
// their weight and r pays their sum (r's own weight it earns and pays at
// once). No skips are counted for a forced pick.
func (p *pool) charge(eff resource.Vector, r *tenant) {
	if p.t >= p.rebaseAt {
		p.rebase()
	}
	p.blocked = p.blocked[:0]
	if p.noneFits(eff) {
		return // nobody earns; r earns and pays its own weight
	}
	p.findBlocked(eff)
	we := p.wsum
	if p.n > len(p.blocked) {
		p.detached = p.detached[:0]
		for _, t := range p.blocked {
			we -= t.cls.weight
			p.detached = append(p.detached, p.detach(t))
		}
		p.t++
		p.reattach()
	} else {
		we = 0
	}
	r.credit -= we
}

// reattach puts the lifted-out blocked tenants back; they did not earn in
// this pick, so base −= w keeps their credit unchanged.
func (p *pool) reattach() {
	for _, it := range p.detached {
		it.base -= it.t.cls.weight
		p.attach(it.t.cls, it)
	}
}

// rebase folds the virtual counter into every base; orders are unchanged.
func (p *pool) rebase() {
	for _, c := range p.active {
		for i := range c.h {
			c.h[i].base += c.weight * p.t
		}
	}
	p.t = 0
}
