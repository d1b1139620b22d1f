package manager

import (
	"context"
	"time"

	"github.com/wovyr/wovyr/probecache"
	"github.com/wovyr/wovyr/sandbox"
)

// ProbeCache keeps probe answers between processes (package probecache).
// The manager is its only writer: every record it holds is the answer of a
// real probe, so a backend that was never probed is never selected.
type ProbeCache interface {
	// CachedProbe returns the stored answer for backend probed under key.
	CachedProbe(backend, key string) (probecache.Record, bool)
	// PutProbe stores r, replacing any answer for the same backend and key.
	PutProbe(r probecache.Record) error
}

// DefaultProbeMaxAge is how long an available backend's stored answer is
// reused: long enough that a one-shot command rarely probes, short enough
// that what no key covers (a device that went away) is seen within a day.
const DefaultProbeMaxAge = 24 * time.Hour

// unavailableMaxAge bounds the reuse of an "unavailable" answer. A probe
// can fail for a passing reason (a timeout on a loaded node), and reusing
// that for a day would refuse every workload that needs the backend.
const unavailableMaxAge = time.Minute

// stored returns b's stored answer if it is still usable: same key, same
// kernel, younger than the age limit, and, if available, adopted by b.
func (m *Manager) stored(ctx context.Context, b sandbox.Backend) (probeAnswer, bool) {
	pc, ok := b.(sandbox.ProbeCacher)
	if m.probes == nil || !ok {
		return probeAnswer{}, false
	}
	key := pc.ProbeKey()
	if key == "" {
		return probeAnswer{}, false
	}
	rec, ok := m.probes.CachedProbe(b.Name(), key)
	if !ok {
		return probeAnswer{}, false
	}
	limit := m.maxAge
	if !rec.Capability.Available {
		limit = min(limit, unavailableMaxAge)
	}
	switch age := m.now().Sub(rec.At); {
	case rec.Backend != b.Name() || rec.Key != key:
		return probeAnswer{}, false
	case rec.Kernel != m.kernel:
		m.log.Debug("stored probe is for another kernel", "backend", b.Name(), "stored", rec.Kernel, "now", m.kernel)
		return probeAnswer{}, false
	case age < 0 || age > limit:
		m.log.Debug("stored probe too old", "backend", b.Name(), "age", age, "limit", limit)
		return probeAnswer{}, false
	}
	if rec.Capability.Available {
		if err := pc.Adopt(ctx, rec.Capability); err != nil {
			m.log.Info("stored probe not adopted; probing", "backend", b.Name(), "err", err)
			return probeAnswer{}, false
		}
	}
	m.log.Debug("probe from store", "backend", b.Name(), "available", rec.Capability.Available, "at", rec.At)
	return probeAnswer{capa: rec.Capability, at: rec.At, cached: true}, true
}

// probeNow runs b's probe and stores the answer under the key b had before
// it ran (a change during the probe then voids the answer at next use).
func (m *Manager) probeNow(ctx context.Context, b sandbox.Backend) probeAnswer {
	var key string
	pc, cacheable := b.(sandbox.ProbeCacher)
	if cacheable && m.probes != nil {
		key = pc.ProbeKey()
	}
	start := m.now()
	capa := b.Probe(ctx)
	took := m.now().Sub(start)
	m.log.Debug("probe", "backend", b.Name(), "available", capa.Available, "reason", capa.Reason, "version", capa.Version, "took", took)
	if key != "" {
		rec := probecache.Record{Backend: b.Name(), Key: key, Kernel: m.kernel, Capability: capa, At: start, Took: took}
		if err := m.probes.PutProbe(rec); err != nil {
			m.log.Warn("store probe answer", "backend", b.Name(), "err", err)
		}
	}
	return probeAnswer{capa: capa, at: start}
}
