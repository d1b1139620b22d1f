package sched

import "hash/maphash"

// table maps names to records: task ids to queue entries, tenant names to
// tenants. It is a map[string]V that hashes the name once per call:
// Submit's duplicate check and insert, and Done's look-up and delete, each
// share one hash and one probe sequence (a Go map costs two of each, which
// was the largest cost of a pick at 10,000 tenants), and a hit reads the
// record itself, which the caller reads next anyway. Open addressing with
// linear probing; the hash is kept per slot so that a probe compares names
// only on a hash match; deletion shifts the run back, leaving no
// tombstones. It is only looked up, never iterated, so its random hash seed
// cannot reach a decision.
type table[V keyed] struct {
	seed  maphash.Seed
	slots []slot[V] // a power of two long, at most half full
	n     int
}

// keyed is a record that knows its name.
type keyed interface {
	comparable
	key() string
}

func (e *entry) key() string  { return e.task.ID }
func (t *tenant) key() string { return t.name }

type slot[V keyed] struct {
	hash uint64 // 0: empty (hashes are made nonzero)
	e    V
}

func newTable[V keyed]() table[V] {
	return table[V]{seed: maphash.MakeSeed(), slots: make([]slot[V], 64)}
}

func (m *table[V]) hash(id string) uint64 {
	return maphash.String(m.seed, id) | 1
}

// find returns id's record, or the zero V and the empty slot where it
// would go.
func (m *table[V]) find(id string) (e V, h uint64, at int) {
	h = m.hash(id)
	mask := len(m.slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.hash == 0 {
			return e, h, i
		}
		if s.hash == h && s.e.key() == id {
			return s.e, h, i
		}
	}
}

// get returns id's record or the zero V.
func (m *table[V]) get(id string) V {
	e, _, _ := m.find(id)
	return e
}

// insertAt puts e into the empty slot that find returned for its name,
// with no other change to the table in between.
func (m *table[V]) insertAt(at int, h uint64, e V) {
	m.slots[at] = slot[V]{h, e}
	m.n++
	if 2*m.n > len(m.slots) {
		m.grow()
	}
}

// deleteAt empties a slot that find returned with a record, shifting back
// the records after it that probed past it.
func (m *table[V]) deleteAt(at int) {
	mask := len(m.slots) - 1
	i := at
	for j := (i + 1) & mask; m.slots[j].hash != 0; j = (j + 1) & mask {
		// j's entry may move to i when i lies cyclically in [home(j), j).
		if home := int(m.slots[j].hash) & mask; (j-home)&mask >= (j-i)&mask {
			m.slots[i] = m.slots[j]
			i = j
		}
	}
	m.slots[i] = slot[V]{}
	m.n--
}

func (m *table[V]) grow() {
	old := m.slots
	m.slots = make([]slot[V], 2*len(old))
	mask := len(m.slots) - 1
	for _, s := range old {
		if s.hash == 0 {
			continue
		}
		i := int(s.hash) & mask
		for m.slots[i].hash != 0 {
			i = (i + 1) & mask
		}
		m.slots[i] = s
	}
}
