package sched

import (
	"slices"
	"sync"
	"time"

	"github.com/wovyr/wovyr/resource"
)

// Scheduler is the fair scheduler. It is safe for concurrent use (one mutex);
// its decisions depend only on the order of calls and their arguments.
type Scheduler struct {
	mu           sync.Mutex
	cfg          Config
	tenants      table[*tenant] // looked up, never iterated
	order        []*tenant      // registration order
	nextSeq      int64
	tasks        table[*entry] // queued and running, by id; looked up, never iterated
	queued       int
	inUse        resource.Vector
	reservations []*tenant // tenants whose head holds a reservation, oldest first
	pool         pool
	spare        []*entry // recycled entries
}

type tenant struct {
	name    string
	seq     int64 // registration order: the tie-break
	cfg     TenantConfig
	head    *entry
	tail    *entry
	queued  int
	running int
	inUse   resource.Vector

	reserved bool
	earning  bool  // queued and under quota: its credit grows with every pick
	inPool   bool  // an earner in the class heaps (not reserved)
	credit   int64 // valid while !earning
	base     int64 // credit − weight × pool counter, for earners outside the heaps
	outPos   int   // index in pool.outside
	cls      *class
	clsPos   int
	dimPos   [dims]int

	st TenantStats // counters only
}

type entry struct {
	task       Task
	t          *tenant
	queuedAt   time.Time
	share      int64 // what its start costs (Config.Charge)
	skips      int
	running    bool
	prev, next *entry
}

// New returns an empty scheduler with no tenants.
func New(cfg Config) (*Scheduler, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Scheduler{
		cfg:     cfg,
		tenants: newTable[*tenant](),
		tasks:   newTable[*entry](),
		pool:    newPool(cfg.Placer),
	}, nil
}

// AddTenant registers a tenant. Registration order is the tie-break between
// tenants of equal credit: register tenants in a stable order (e.g. sorted
// by name) for reproducible decisions.
func (s *Scheduler) AddTenant(name string, c TenantConfig) error {
	if err := validTenantName(name); err != nil {
		return err
	}
	c, err := c.withDefaults()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, h, at := s.tenants.find(name)
	if old != nil {
		return badInput(ErrTenantExists, "tenant", "tenant %s already exists", name)
	}
	t := &tenant{name: name, seq: s.nextSeq, cfg: c, clsPos: -1, dimPos: [dims]int{-1, -1, -1, -1}}
	s.nextSeq++
	s.tenants.insertAt(at, h, t)
	s.order = append(s.order, t)
	return nil
}

// UpdateTenant changes a tenant's weight and bounds. Its credit, queue and
// running tasks are kept; a lower MaxQueued rejects new tasks only.
func (s *Scheduler) UpdateTenant(name string, c TenantConfig) error {
	c, err := c.withDefaults()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tenants.get(name)
	if t == nil {
		return badInput(ErrUnknownTenant, "tenant", "unknown tenant %q", name)
	}
	if t.earning {
		s.pool.remove(t)
	}
	t.cfg = c
	s.refresh(t, false)
	return nil
}

// RemoveTenant forgets a tenant that has nothing queued or running. Its
// credit is dropped.
func (s *Scheduler) RemoveTenant(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, _, at := s.tenants.find(name)
	if t == nil {
		return badInput(ErrUnknownTenant, "tenant", "unknown tenant %q", name)
	}
	if t.queued > 0 || t.running > 0 {
		return badInput(ErrTenantBusy, "tenant", "tenant %s has %d queued and %d running", name, t.queued, t.running)
	}
	s.tenants.deleteAt(at)
	s.order = slices.DeleteFunc(s.order, func(o *tenant) bool { return o == t })
	return nil
}

// Submit queues a task at the tail of its tenant's queue. now is the
// caller's clock, used only for Start.Wait. Bad input (unknown tenant,
// negative or too large demand, a duplicate id) changes nothing; a full
// queue answers a *QueueFullError and counts a rejection.
func (s *Scheduler) Submit(task Task, now time.Time) error {
	if err := validateTask(task, s.cfg.Capacity); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tenants.get(task.Tenant)
	if t == nil {
		return badInput(ErrUnknownTenant, "tenant", "unknown tenant %q", task.Tenant)
	}
	dup, h, slot := s.tasks.find(task.ID)
	if dup != nil {
		return badInput(ErrDuplicateTask, "id", "task %q is already queued or running", task.ID)
	}
	if err := overQuota(task, t.cfg); err != nil {
		return err
	}
	if t.queued >= t.cfg.MaxQueued {
		t.st.Rejected++
		return &QueueFullError{Tenant: t.name, Limit: t.cfg.MaxQueued}
	}
	if s.queued >= s.cfg.MaxQueued {
		t.st.Rejected++
		return &QueueFullError{Tenant: t.name, Global: true, Limit: s.cfg.MaxQueued}
	}
	e := s.newEntry()
	*e = entry{task: task, t: t, queuedAt: now, share: shareOf(s.cfg.Charge, task.Demand, s.cfg.Capacity), prev: t.tail}
	if t.tail != nil {
		t.tail.next = e
	} else {
		t.head = e
	}
	t.tail = e
	t.queued++
	s.queued++
	s.tasks.insertAt(slot, h, e)
	t.st.Admitted++
	if t.head == e {
		s.refresh(t, true)
	}
	return nil
}

// Cancel removes a queued task (the caller gave up on it). A task that is
// running or unknown is ErrUnknownTask and changes nothing.
func (s *Scheduler) Cancel(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, _, slot := s.tasks.find(id)
	if e == nil || e.running {
		return badInput(ErrUnknownTask, "id", "task %q is not queued", id)
	}
	t := e.t
	wasHead := t.head == e
	s.unlink(e)
	headChanged := wasHead && t.head != nil && t.head.task.Demand != e.task.Demand
	s.tasks.deleteAt(slot)
	t.st.Cancelled++
	if wasHead && t.reserved {
		s.dropReservation(t)
	}
	s.refresh(t, headChanged)
	s.recycle(e)
	return nil
}

// Done returns a running task's resources. A task that is not running is
// ErrUnknownTask and changes nothing.
func (s *Scheduler) Done(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, _, slot := s.tasks.find(id)
	if e == nil || !e.running {
		return badInput(ErrUnknownTask, "id", "task %q is not running", id)
	}
	t := e.t
	d := e.task.Demand
	t.running--
	t.inUse = t.inUse.Sub(d)
	s.inUse = s.inUse.Sub(d)
	t.st.Completed++
	s.tasks.deleteAt(slot)
	s.refresh(t, false)
	s.recycle(e)
	return nil
}

// refresh puts t into or out of the earners and the class heaps after its
// state changed; headChanged says its head's demand changed.
func (s *Scheduler) refresh(t *tenant, headChanged bool) {
	earn := t.head != nil && t.underQuota()
	heap := earn && !t.reserved
	if t.earning && (!earn || t.inPool != heap) {
		s.pool.remove(t)
	}
	switch {
	case earn && !t.earning:
		s.pool.add(t, heap)
	case t.inPool && headChanged:
		s.pool.headChanged(t)
	}
}

// underQuota says t may start its head now as far as its own quotas go.
func (t *tenant) underQuota() bool {
	return t.running < t.cfg.MaxRunning && (t.cfg.MaxGPU == 0 || t.inUse.GPU+t.head.task.Demand.GPU <= t.cfg.MaxGPU)
}

// overQuota refuses a task its tenant could never start.
func overQuota(task Task, c TenantConfig) error {
	if c.MaxGPU > 0 && task.Demand.GPU > c.MaxGPU {
		return badInput(ErrOverQuota, "resources", "task demands %d GPUs, tenant %s may hold %d", task.Demand.GPU, task.Tenant, c.MaxGPU)
	}
	return nil
}

// unlink takes a queued entry out of its tenant's queue.
func (s *Scheduler) unlink(e *entry) {
	t := e.t
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		t.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		t.tail = e.prev
	}
	e.prev, e.next = nil, nil
	t.queued--
	s.queued--
}

func (s *Scheduler) dropReservation(t *tenant) {
	s.reservations = slices.DeleteFunc(s.reservations, func(o *tenant) bool { return o == t })
	t.reserved = false
}

func (s *Scheduler) newEntry() *entry {
	if n := len(s.spare); n > 0 {
		e := s.spare[n-1]
		s.spare = s.spare[:n-1]
		return e
	}
	return new(entry)
}

func (s *Scheduler) recycle(e *entry) {
	*e = entry{}
	if len(s.spare) < 1024 {
		s.spare = append(s.spare, e)
	}
}
