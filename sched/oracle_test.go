package sched

import (
	"slices"
	"time"

	"github.com/wovyr/wovyr/resource"
)

// oracle is the plain O(n) definition of the scheduler's semantics: the
// fast Scheduler must make exactly its decisions. Tenants live in a slice
// in registration order; every pick walks all of them.
type oracle struct {
	cfg          Config
	tenants      []*otenant // registration order
	byName       map[string]*otenant
	tasks        map[string]*otask
	queued       int
	inUse        resource.Vector
	reservations []*otenant
	nextSeq      int64
	// onPick, if set, sees every SWRR pick's eligible set and winner.
	onPick func(eligible []*otenant, winner *otenant)
	elig   []*otenant
}

type otenant struct {
	name     string
	seq      int64
	cfg      TenantConfig
	credit   int64
	queue    []*otask
	running  int
	inUse    resource.Vector
	reserved bool
	st       TenantStats
}

type otask struct {
	task     Task
	t        *otenant
	queuedAt time.Time
	skips    int
	running  bool
}

func newOracle(cfg Config) (*oracle, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &oracle{cfg: cfg, byName: map[string]*otenant{}, tasks: map[string]*otask{}}, nil
}

func (o *oracle) AddTenant(name string, c TenantConfig) error {
	if err := validTenantName(name); err != nil {
		return err
	}
	c, err := c.withDefaults()
	if err != nil {
		return err
	}
	if o.byName[name] != nil {
		return badInput(ErrTenantExists, "tenant", "exists")
	}
	t := &otenant{name: name, seq: o.nextSeq, cfg: c}
	o.nextSeq++
	o.byName[name] = t
	o.tenants = append(o.tenants, t)
	return nil
}

func (o *oracle) UpdateTenant(name string, c TenantConfig) error {
	c, err := c.withDefaults()
	if err != nil {
		return err
	}
	t := o.byName[name]
	if t == nil {
		return badInput(ErrUnknownTenant, "tenant", "unknown")
	}
	t.cfg = c
	return nil
}

func (o *oracle) RemoveTenant(name string) error {
	t := o.byName[name]
	if t == nil {
		return badInput(ErrUnknownTenant, "tenant", "unknown")
	}
	if len(t.queue) > 0 || t.running > 0 {
		return badInput(ErrTenantBusy, "tenant", "busy")
	}
	delete(o.byName, name)
	o.tenants = slices.DeleteFunc(o.tenants, func(x *otenant) bool { return x == t })
	return nil
}

func (o *oracle) Submit(task Task, now time.Time) error {
	if err := validateTask(task, o.cfg.Capacity); err != nil {
		return err
	}
	t := o.byName[task.Tenant]
	if t == nil {
		return badInput(ErrUnknownTenant, "tenant", "unknown")
	}
	if o.tasks[task.ID] != nil {
		return badInput(ErrDuplicateTask, "id", "dup")
	}
	if err := overQuota(task, t.cfg); err != nil {
		return err
	}
	if len(t.queue) >= t.cfg.MaxQueued {
		t.st.Rejected++
		return &QueueFullError{Tenant: t.name, Limit: t.cfg.MaxQueued}
	}
	if o.queued >= o.cfg.MaxQueued {
		t.st.Rejected++
		return &QueueFullError{Tenant: t.name, Global: true, Limit: o.cfg.MaxQueued}
	}
	k := &otask{task: task, t: t, queuedAt: now}
	t.queue = append(t.queue, k)
	o.tasks[task.ID] = k
	o.queued++
	t.st.Admitted++
	return nil
}

func (o *oracle) Cancel(id string) error {
	k := o.tasks[id]
	if k == nil || k.running {
		return badInput(ErrUnknownTask, "id", "not queued")
	}
	t := k.t
	i := slices.Index(t.queue, k)
	if i == 0 && t.reserved {
		t.reserved = false
		o.reservations = slices.DeleteFunc(o.reservations, func(x *otenant) bool { return x == t })
	}
	t.queue = slices.Delete(t.queue, i, i+1)
	delete(o.tasks, id)
	o.queued--
	t.st.Cancelled++
	return nil
}

func (o *oracle) Done(id string) error {
	k := o.tasks[id]
	if k == nil || !k.running {
		return badInput(ErrUnknownTask, "id", "not running")
	}
	t := k.t
	t.running--
	t.inUse = t.inUse.Sub(k.task.Demand)
	o.inUse = o.inUse.Sub(k.task.Demand)
	t.st.Completed++
	delete(o.tasks, id)
	return nil
}

func (o *oracle) Next(free resource.Vector, now time.Time) (Start, bool) {
	eff := effective(free, o.cfg.Capacity, o.inUse)
	for i, t := range o.reservations {
		if !o.under(t) {
			continue
		}
		d := t.queue[0].task.Demand
		if d.Fits(eff) {
			// A forced pick: every earner earns, t pays their sum.
			o.reservations = slices.Delete(o.reservations, i, i+1)
			o.charge(t, o.share(t))
			t.reserved = false
			return o.start(t, now, true), true
		}
		eff = clip(eff.Sub(d))
	}
	// Credits are compared after earning at the smallest head charge x.
	var x int64
	for _, t := range o.tenants {
		if len(t.queue) > 0 && !t.reserved && o.under(t) && (x == 0 || o.share(t) < x) {
			x = o.share(t)
		}
	}
	var best *otenant
	var blocked []*otenant
	for _, t := range o.tenants {
		if len(t.queue) == 0 || t.reserved || !o.under(t) {
			continue
		}
		if !t.queue[0].task.Demand.Fits(eff) {
			blocked = append(blocked, t)
		} else if best == nil || t.credit+x*t.cfg.Weight > best.credit+x*best.cfg.Weight {
			best = t // the largest credit after earning; registration order breaks ties
		}
	}
	if best == nil {
		return Start{}, false
	}
	// A blocked head missed its turn when its credit after earning beats the
	// winner's.
	for _, t := range blocked {
		if t.credit+x*t.cfg.Weight > best.credit+x*best.cfg.Weight ||
			t.credit+x*t.cfg.Weight == best.credit+x*best.cfg.Weight && t.seq < best.seq {
			t.queue[0].skips++
			if t.queue[0].skips > o.cfg.ReserveAfter {
				t.reserved = true
				o.reservations = append(o.reservations, t)
			}
		}
	}
	o.charge(best, o.share(best))
	return o.start(best, now, false), true
}

// under says t's head may start as far as its quotas go.
func (o *oracle) under(t *otenant) bool {
	return t.running < t.cfg.MaxRunning && (t.cfg.MaxGPU == 0 || t.inUse.GPU+t.queue[0].task.Demand.GPU <= t.cfg.MaxGPU)
}

// share is the charge of t's head.
func (o *oracle) share(t *otenant) int64 {
	return shareOf(o.cfg.Charge, t.queue[0].task.Demand, o.cfg.Capacity)
}

// charge is the SWRR step: every earner (a queued head, under quota,
// reserved or not) earns its weight times the start's charge, the winner
// pays their sum.
func (o *oracle) charge(winner *otenant, share int64) {
	o.elig = o.elig[:0]
	var sum int64
	for _, t := range o.tenants {
		if len(t.queue) > 0 && o.under(t) {
			t.credit += share * t.cfg.Weight
			sum += t.cfg.Weight
			o.elig = append(o.elig, t)
		}
	}
	winner.credit -= share * sum
	winner.st.Charged += share
	if o.onPick != nil {
		o.onPick(o.elig, winner)
	}
}

func (o *oracle) start(t *otenant, now time.Time, reserved bool) Start {
	k := t.queue[0]
	t.queue = t.queue[1:]
	o.queued--
	k.running = true
	t.running++
	t.inUse = t.inUse.Add(k.task.Demand)
	o.inUse = o.inUse.Add(k.task.Demand)
	wait := max(now.Sub(k.queuedAt), 0)
	t.st.Started++
	t.st.WaitTotal += wait
	t.st.WaitMax = max(t.st.WaitMax, wait)
	return Start{Task: k.task, Wait: wait, Reserved: reserved}
}

func (o *oracle) Snapshot() []TenantStats {
	out := make([]TenantStats, len(o.tenants))
	for i, t := range o.tenants {
		st := t.st
		st.Tenant, st.Weight = t.name, t.cfg.Weight
		st.MaxQueued, st.MaxRunning = t.cfg.MaxQueued, t.cfg.MaxRunning
		st.Queued, st.Running, st.InUse = len(t.queue), t.running, t.inUse
		st.Reserved, st.Credit = t.reserved, t.credit
		out[i] = st
	}
	return out
}

func (o *oracle) Free() resource.Vector { return o.cfg.Capacity.Sub(o.inUse) }

// impl is what the tests and benchmarks drive: the Scheduler or the oracle.
type impl interface {
	AddTenant(string, TenantConfig) error
	UpdateTenant(string, TenantConfig) error
	RemoveTenant(string) error
	Submit(Task, time.Time) error
	Next(resource.Vector, time.Time) (Start, bool)
	Done(string) error
	Cancel(string) error
	Snapshot() []TenantStats
	Free() resource.Vector
}

var (
	_ impl = (*Scheduler)(nil)
	_ impl = (*oracle)(nil)
)
