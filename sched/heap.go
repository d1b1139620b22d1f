package sched

// The two indexed heaps of the pool. Each element records its
// own position in the tenant (clsPos, dimPos), so removal and key changes are
// O(log n). They are written out concretely: a comparison through a function
// value costs more than the rest of a pick.

// citem is a tenant in its weight class. base is its credit minus
// weight × the pool's virtual pick counter, so within one class (one weight)
// the order by base is the order by credit.
type citem struct {
	base int64
	seq  int64
	t    *tenant
}

// above is the class order: larger credit first, then earlier registration.
func (a *citem) above(b *citem) bool {
	return a.base > b.base || a.base == b.base && a.seq < b.seq
}

// classHeap is a 4-ary heap: half the depth of a binary one, so a winner
// sinking after it paid moves past half as many tenants, and each move
// writes one tenant's position (the sinking item is written once, where it
// stops). Children of i are 4i+1 … 4i+4.
type classHeap []citem

const arity = 4

// set puts it at i and records the position in its tenant.
func (h classHeap) set(i int, it citem) {
	h[i] = it
	it.t.clsPos = i
}

func (h classHeap) up(i int) {
	it := h[i]
	for i > 0 {
		p := (i - 1) / arity
		if !it.above(&h[p]) {
			break
		}
		h.set(i, h[p])
		i = p
	}
	h.set(i, it)
}

func (h classHeap) down(i int) {
	it := h[i]
	n := len(h)
	for {
		first := arity*i + 1
		if first >= n {
			break
		}
		m := first
		if first+arity <= n { // all four children: no loop, no bounds checks
			ch := h[first : first+arity : first+arity]
			k, k2 := 0, 2
			if ch[1].above(&ch[0]) {
				k = 1
			}
			if ch[3].above(&ch[2]) {
				k2 = 3
			}
			if ch[k2].above(&ch[k]) {
				k = k2
			}
			m += k
		} else {
			for c := first + 1; c < n; c++ {
				if h[c].above(&h[m]) {
					m = c
				}
			}
		}
		if !h[m].above(&it) {
			break
		}
		h.set(i, h[m])
		i = m
	}
	h.set(i, it)
}

func (h *classHeap) push(it citem) {
	*h = append(*h, it)
	h.up(len(*h) - 1)
}

// remove takes out the element at i and returns it.
func (h *classHeap) remove(i int) citem {
	old := *h
	it := old[i]
	last := len(old) - 1
	*h = old[:last]
	if i != last {
		moved := old[last]
		old[i] = moved
		h.down(i)
		h.up(moved.t.clsPos)
	}
	it.t.clsPos = -1
	return it
}

// ditem is a tenant keyed by its head task's demand in one dimension.
type ditem struct {
	key int64
	t   *tenant
}

// dimHeap is a max-heap of head demands, used to find the heads that do not
// fit without looking at those that do. The pool's dims hold negated
// demands and charges, so the same code keeps the smallest head on top.
type dimHeap struct {
	dim   int
	items []ditem
}

func (h *dimHeap) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].t.dimPos[h.dim] = i
	h.items[j].t.dimPos[h.dim] = j
}

func (h *dimHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h.items[i].key <= h.items[p].key {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *dimHeap) down(i int) {
	n := len(h.items)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h.items[r].key > h.items[l].key {
			m = r
		}
		if h.items[m].key <= h.items[i].key {
			return
		}
		h.swap(i, m)
		i = m
	}
}

func (h *dimHeap) push(key int64, t *tenant) {
	h.items = append(h.items, ditem{key, t})
	t.dimPos[h.dim] = len(h.items) - 1
	h.up(len(h.items) - 1)
}

func (h *dimHeap) remove(t *tenant) {
	i := t.dimPos[h.dim]
	last := len(h.items) - 1
	if i != last {
		h.swap(i, last)
	}
	h.items = h.items[:last]
	if i != last {
		h.down(i)
		h.up(i)
	}
	t.dimPos[h.dim] = -1
}

func (h *dimHeap) setKey(t *tenant, key int64) {
	i := t.dimPos[h.dim]
	old := h.items[i].key
	h.items[i].key = key
	if key > old {
		h.up(i)
	} else if key < old {
		h.down(i)
	}
}

// top returns the largest key, or a negative number when empty.
func (h *dimHeap) top() int64 {
	if len(h.items) == 0 {
		return -1
	}
	return h.items[0].key
}
