package sched

import "github.com/wovyr/wovyr/resource"

// Stats returns one tenant's state and counters.
func (s *Scheduler) Stats(name string) (TenantStats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tenants.get(name)
	if t == nil {
		return TenantStats{}, badInput(ErrUnknownTenant, "tenant", "unknown tenant %q", name)
	}
	return s.stats(t), nil
}

// Snapshot returns every tenant's stats in registration order (O(tenants);
// for a metrics scrape, not for every request).
func (s *Scheduler) Snapshot() []TenantStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]TenantStats, len(s.order))
	for i, t := range s.order {
		out[i] = s.stats(t)
	}
	return out
}

func (s *Scheduler) stats(t *tenant) TenantStats {
	st := t.st
	st.Tenant = t.name
	st.Weight = t.cfg.Weight
	st.MaxQueued = t.cfg.MaxQueued
	st.MaxRunning = t.cfg.MaxRunning
	st.Queued = t.queued
	st.Running = t.running
	st.InUse = t.inUse
	st.Reserved = t.reserved
	st.Credit = s.pool.credit(t)
	return st
}

// InUse is the sum of the demands of running tasks.
func (s *Scheduler) InUse() resource.Vector {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inUse
}

// Free is Capacity minus InUse: the vector to pass to Next when the
// scheduler's capacity is the whole story.
func (s *Scheduler) Free() resource.Vector {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.Capacity.Sub(s.inUse)
}

// Queued is the number of tasks queued across all tenants.
func (s *Scheduler) Queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queued
}

// Capacity is the configured total capacity.
func (s *Scheduler) Capacity() resource.Vector { return s.cfg.Capacity }
