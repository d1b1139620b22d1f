package server

import (
	"container/list"
	"context"
	"fmt"
	"sync"

	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/gpu"
	"github.com/wovyr/wovyr/resource"
	"github.com/wovyr/wovyr/sandbox"
)

// Ticket is one accepted invocation as admission sees it.
type Ticket struct {
	ID        string
	Tenant    string
	Weight    int    // the tenant's configured weight
	Backend   string // the backend Select chose
	Resources resource.Vector
	// GPU is which devices qualify for Resources.GPU (MIG profile, memory).
	GPU gpu.Request
}

// Admission is the seam where admission and ordering happen: the only
// place that decides whether a submission is taken and when it may start.
// The server calls Admit once per submission (before recording it), then
// Acquire from the invocation's own goroutine, then Done exactly once for
// every admitted ticket. A fair scheduler (package sched) plugs in here by
// implementing it; Limiter is the plain default.
type Admission interface {
	// Admit takes or refuses t. A refusal is an error of class
	// RateLimited (429), optionally wrapped with a retry delay; nothing has
	// been recorded yet.
	Admit(t Ticket) error
	// Acquire blocks until t may start, or ctx ends (then it returns
	// ctx's cause and t has not started).
	Acquire(ctx context.Context, t Ticket) error
	// TryAcquire starts t if it may start now, without waiting, and
	// reports whether it did; false changes nothing, and Acquire waits
	// for t as before.
	TryAcquire(t Ticket) bool
	// Done releases t, whether or not it started.
	Done(t Ticket)
	// Queued is how many admitted tickets wait to start.
	Queued() int
}

// Limiter is the default Admission: first come, first served, with a node
// concurrency cap and per-tenant pending and running quotas. It is not
// fair under contention (a tenant with a deep queue delays the others);
// that is what the scheduler is for.
type Limiter struct {
	mu       sync.Mutex
	capacity int
	running  int
	tenants  map[string]config.Tenant
	pending  map[string]int // admitted, not done
	active   map[string]int // started, not done
	started  map[string]bool
	waiters  *list.List // of *waiter, oldest first
}

type waiter struct {
	t     Ticket
	ready chan struct{}
	done  bool // granted
}

// NewLimiter returns the default admission for cfg.
func NewLimiter(cfg config.Config) *Limiter {
	l := &Limiter{capacity: max(cfg.Concurrency, 1), tenants: map[string]config.Tenant{}, pending: map[string]int{},
		active: map[string]int{}, started: map[string]bool{}, waiters: list.New()}
	for _, t := range cfg.Tenants {
		l.tenants[t.Name] = t
	}
	return l
}

// Admit implements Admission: the tenant's pending quota.
func (l *Limiter) Admit(t Ticket) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if q := l.tenants[t.Tenant].MaxPending; q > 0 && l.pending[t.Tenant] >= q {
		return sandbox.Errorf(RateLimited, "", "tenant %s has %d invocations pending, its quota", t.Tenant, q)
	}
	l.pending[t.Tenant]++
	return nil
}

func (l *Limiter) fits(t Ticket) bool {
	q := l.tenants[t.Tenant].MaxRunning
	return l.running < l.capacity && (q == 0 || l.active[t.Tenant] < q)
}

func (l *Limiter) grant(t Ticket) {
	l.running++
	l.active[t.Tenant]++
	l.started[t.ID] = true
}

// Acquire implements Admission.
func (l *Limiter) Acquire(ctx context.Context, t Ticket) error {
	l.mu.Lock()
	w := &waiter{t: t, ready: make(chan struct{})}
	e := l.waiters.PushBack(w)
	l.wake()
	l.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		defer l.mu.Unlock()
		if w.done { // granted as ctx ended: it counts as started
			return nil
		}
		l.waiters.Remove(e)
		l.wake()
		return fmt.Errorf("not started: %w", context.Cause(ctx))
	}
}

// TryAcquire implements Admission: t starts now if it fits and nothing
// waits before it.
func (l *Limiter) TryAcquire(t Ticket) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.waiters.Len() > 0 || !l.fits(t) {
		return false
	}
	l.grant(t)
	return true
}

// Done implements Admission.
func (l *Limiter) Done(t Ticket) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending[t.Tenant]--
	if l.pending[t.Tenant] <= 0 {
		delete(l.pending, t.Tenant)
	}
	if l.started[t.ID] {
		delete(l.started, t.ID)
		l.running--
		l.active[t.Tenant]--
		if l.active[t.Tenant] <= 0 {
			delete(l.active, t.Tenant)
		}
		l.wake()
	}
}

// wake grants waiters in arrival order while they fit; one that does not
// fit (its tenant is at quota) does not block those behind it.
func (l *Limiter) wake() {
	for e := l.waiters.Front(); e != nil && l.running < l.capacity; {
		next := e.Next()
		w := e.Value.(*waiter)
		if l.fits(w.t) {
			l.grant(w.t)
			w.done = true
			l.waiters.Remove(e)
			close(w.ready)
		}
		e = next
	}
}

// Queued implements Admission.
func (l *Limiter) Queued() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waiters.Len()
}
