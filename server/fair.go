package server

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/gpu"
	"github.com/wovyr/wovyr/resource"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/sched"
)

// Fair is the Admission backed by the fair scheduler (package sched):
// smooth weighted round-robin across tenants by their configured weights,
// a per-tenant queue bound (429 beyond it) and running quota, and the
// node's capacity as a resource vector. The scheduler itself is
// deterministic and caller-driven; Fair is the caller: it submits on
// Admit, picks whenever capacity may have freed (after Admit and Done), and
// wakes the picked invocation's goroutine.
type Fair struct {
	mu      sync.Mutex
	s       *sched.Scheduler
	waiting map[string]chan struct{} // admitted, not yet started: closed when picked
	started map[string]bool
	gpu     *fairGPU // nil: this node has no GPUs (gpu.go)
}

// slotMillis is the CPU demand of an invocation that names none: one
// concurrency slot, so that Concurrency bounds how many run at once.
const slotMillis = 1000

// NewFair returns a Fair admission for cfg's tenants and concurrency, on
// a node without GPUs.
func NewFair(cfg config.Config) (*Fair, error) { return NewFairGPU(cfg, nil) }

// NewFairGPU is NewFair on a node whose GPUs alloc assigns (nil: none).
// Starts are charged by dominant share (DRF), which decides exactly as
// plain SWRR while every invocation has the same demand.
func NewFairGPU(cfg config.Config, alloc *gpu.Allocator) (*Fair, error) {
	sc := sched.Config{Capacity: resource.Vector{
		CPUMillis:   int64(max(cfg.Concurrency, 1)) * slotMillis,
		MemoryBytes: 1 << 62, // memory is bounded per sandbox; not a scheduling dimension here yet
	}, Charge: sched.ChargeDominantShare}
	fg := newFairGPU(alloc)
	if fg != nil {
		sc.Capacity.GPU, sc.Placer = int64(alloc.Count()), alloc
	}
	s, err := sched.New(sc)
	if err != nil {
		return nil, err
	}
	tenants := slices.Clone(cfg.Tenants)
	// Registration order is the scheduler's tie-break: make it stable.
	slices.SortFunc(tenants, func(a, b config.Tenant) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	for _, t := range tenants {
		tc := sched.TenantConfig{Weight: int64(max(t.Weight, 1)), MaxQueued: t.MaxPending, MaxRunning: t.MaxRunning, MaxGPU: int64(t.MaxGPUs)}
		if err := s.AddTenant(t.Name, tc); err != nil {
			return nil, err
		}
	}
	return &Fair{s: s, waiting: map[string]chan struct{}{}, started: map[string]bool{}, gpu: fg}, nil
}

// demand is what an invocation occupies while it runs.
func demand(t Ticket) resource.Vector {
	d := t.Resources
	if d.CPUMillis == 0 {
		d.CPUMillis = slotMillis
	}
	return d
}

// Admit implements Admission.
func (f *Fair) Admit(t Ticket) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if err := f.gpu.want(t); err != nil {
		return err
	}
	if err := f.s.Submit(sched.Task{ID: t.ID, Tenant: t.Tenant, Demand: demand(t)}, now); err != nil {
		f.gpu.forget(t)
		if errors.Is(err, sched.ErrQueueFull) {
			return sandbox.Wrap(RateLimited, err, "tenant %s", t.Tenant)
		}
		return err
	}
	f.waiting[t.ID] = make(chan struct{})
	f.dispatch(now)
	return nil
}

// Acquire implements Admission.
func (f *Fair) Acquire(ctx context.Context, t Ticket) error {
	f.mu.Lock()
	ch, ok := f.waiting[t.ID]
	f.mu.Unlock()
	if !ok {
		return sandbox.Errorf(sandbox.BackendFailure, "", "invocation %s was not admitted", t.ID)
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// TryAcquire implements Admission: Admit starts whatever fits, so t may
// start now only if it was picked already.
func (f *Fair) TryAcquire(t Ticket) bool {
	f.mu.Lock()
	ch, ok := f.waiting[t.ID]
	f.mu.Unlock()
	if !ok {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Done implements Admission: it frees what t held (or withdraws it from
// its queue) and starts whatever now fits.
func (f *Fair) Done(t Ticket) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.waiting[t.ID]; !ok {
		return
	}
	started := f.started[t.ID]
	if started {
		_ = f.s.Done(t.ID)
	} else {
		_ = f.s.Cancel(t.ID)
		f.gpu.forget(t)
	}
	delete(f.waiting, t.ID)
	delete(f.started, t.ID)
	if started && t.Resources.GPU > 0 {
		// Scrub the devices without holding up the other tickets.
		f.mu.Unlock()
		f.gpu.release(t)
		f.mu.Lock()
	}
	f.dispatch(time.Now())
}

// Queued implements Admission.
func (f *Fair) Queued() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.s.Queued()
}

// Stats returns the scheduler's per-tenant counters (queue depth, admitted,
// rejected, wait time) for metrics.
func (f *Fair) Stats() []sched.TenantStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.s.Snapshot()
}

// dispatch starts every task the scheduler picks with the capacity free now.
func (f *Fair) dispatch(now time.Time) {
	for {
		st, ok := f.s.Next(f.s.Free(), now)
		if !ok {
			return
		}
		f.started[st.Task.ID] = true
		f.gpu.started(st)
		close(f.waiting[st.Task.ID])
	}
}

// tenantCollector exports the scheduler's per-tenant counters.
type tenantCollector struct {
	stats                                  func() []sched.TenantStats
	depth, running, admitted, rejected, wt *prometheus.Desc
}

func newTenantCollector(stats func() []sched.TenantStats) *tenantCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"tenant"}, nil)
	}
	return &tenantCollector{stats: stats,
		depth:    d("wovyr_tenant_queue_depth", "Invocations queued per tenant."),
		running:  d("wovyr_tenant_running", "Invocations running per tenant."),
		admitted: d("wovyr_tenant_admitted_total", "Submissions the scheduler admitted, per tenant."),
		rejected: d("wovyr_tenant_rejected_total", "Submissions refused for a full queue (429), per tenant."),
		wt:       d("wovyr_tenant_wait_seconds_total", "Summed queue wait of started invocations, per tenant."),
	}
}

func (c *tenantCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.depth, c.running, c.admitted, c.rejected, c.wt} {
		ch <- d
	}
}

func (c *tenantCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.stats() {
		ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(s.Queued), s.Tenant)
		ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, float64(s.Running), s.Tenant)
		ch <- prometheus.MustNewConstMetric(c.admitted, prometheus.CounterValue, float64(s.Admitted), s.Tenant)
		ch <- prometheus.MustNewConstMetric(c.rejected, prometheus.CounterValue, float64(s.Rejected), s.Tenant)
		ch <- prometheus.MustNewConstMetric(c.wt, prometheus.CounterValue, s.WaitTotal.Seconds(), s.Tenant)
	}
}

// Capacity is the node's capacity as the scheduler holds it.
func (f *Fair) Capacity() resource.Vector {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.s.Capacity()
}
