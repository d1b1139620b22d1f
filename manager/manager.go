// Package manager is the SandboxManager: the one place that turns a request
// into a sandbox. It probes the registered backends, checks their
// certifications, and selects — by DESIGN.md §1 — the weakest backend that is
// still at least as strong as the invocation requires. Nothing else in wovyr
// calls Backend.Prepare (pools receive a factory from here), so the isolation
// floor is enforced at exactly one point.
package manager

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/sandbox"
)

// Certs gives the manager the current certification of a backend.
type Certs interface {
	// Cert returns the record certifying exactly k; an error says why
	// there is none.
	Cert(k cert.Key) (cert.Record, error)
}

// Config configures a Manager. It is read once, by New.
type Config struct {
	// Backends to register, in any order; names must be unique.
	Backends []sandbox.Backend
	// Floors per trust class; the zero value is DESIGN.md's defaults.
	Floors sandbox.Floors
	// Certs supplies certification records. Nil means nothing is
	// certified, so nothing is selectable.
	Certs Certs
	// Kernel is this node's kernel release; empty means cert.Kernel().
	Kernel string
	// Logger receives every selection decision. Nil means slog.Default().
	Logger *slog.Logger
	// Probes keeps probe answers between processes for backends that
	// implement sandbox.ProbeCacher (see probe_cache.go). Nil means every
	// backend is probed afresh by this manager.
	Probes ProbeCache
	// ProbeMaxAge is how long a stored probe answer stays usable. Zero
	// means DefaultProbeMaxAge.
	ProbeMaxAge time.Duration
	// Now is the clock for probe ages. Nil means time.Now.
	Now func() time.Time
}

// Manager selects backends and prepares sandboxes. It is safe for
// concurrent use.
type Manager struct {
	backends []sandbox.Backend // sorted by strength, then name
	floors   sandbox.Floors
	certs    Certs
	kernel   string
	log      *slog.Logger

	probes ProbeCache
	maxAge time.Duration
	now    func() time.Time

	mu      sync.Mutex
	probed  map[string]probeAnswer
	probing singleflight.Group // one probe per backend at a time
}

// New returns a manager for cfg's backends.
func New(cfg Config) (*Manager, error) {
	m := &Manager{floors: cfg.Floors, certs: cfg.Certs, kernel: cfg.Kernel, log: cfg.Logger,
		probes: cfg.Probes, maxAge: cmp.Or(cfg.ProbeMaxAge, DefaultProbeMaxAge), now: cfg.Now,
		probed: map[string]probeAnswer{}}
	if m.now == nil {
		m.now = time.Now
	}
	if m.kernel == "" {
		m.kernel = cert.Kernel()
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	seen := map[string]bool{}
	for _, b := range cfg.Backends {
		if seen[b.Name()] {
			return nil, fmt.Errorf("manager: backend %q registered twice", b.Name())
		}
		if !b.Strength().Valid() {
			return nil, fmt.Errorf("manager: backend %q has invalid strength %d", b.Name(), b.Strength())
		}
		seen[b.Name()] = true
		m.backends = append(m.backends, b)
	}
	slices.SortStableFunc(m.backends, func(a, b sandbox.Backend) int {
		if a.Strength() != b.Strength() {
			return int(a.Strength() - b.Strength())
		}
		if a.Name() < b.Name() {
			return -1
		}
		return 1
	})
	return m, nil
}

// Status is one backend's view: what it is, whether it works here, and
// whether it is certified.
type Status struct {
	Name       string                 `json:"name"`
	Strength   sandbox.Strength       `json:"strength"`
	Kinds      []sandbox.WorkloadKind `json:"kinds"`
	Capability sandbox.Capability     `json:"capability"`
	Certified  bool                   `json:"certified"`
	// CertReason says why the backend is not certified.
	CertReason string `json:"cert_reason,omitempty"`
	// ProbedAt is when the probe behind Capability ran; Cached says it
	// ran in an earlier process (a stored answer, see Config.Probes).
	ProbedAt time.Time `json:"probed_at"`
	Cached   bool      `json:"cached,omitempty"`
}

// Backends returns the registered backends, weakest first.
func (m *Manager) Backends() []sandbox.Backend { return slices.Clone(m.backends) }

// Backend returns the backend called name.
func (m *Manager) Backend(name string) (sandbox.Backend, bool) {
	for _, b := range m.backends {
		if b.Name() == name {
			return b, true
		}
	}
	return nil, false
}

// Detect probes every backend (cached; force re-probes) and reports each
// one's availability and certification.
func (m *Manager) Detect(ctx context.Context, force bool) []Status {
	out := make([]Status, 0, len(m.backends))
	for _, b := range m.backends {
		a := m.probe(ctx, b, force)
		st := Status{Name: b.Name(), Strength: b.Strength(), Kinds: b.Kinds(), Capability: a.capa, ProbedAt: a.at, Cached: a.cached}
		if err := m.certified(b, a.capa); err != nil {
			st.CertReason = err.Error()
		} else {
			st.Certified = true
		}
		out = append(out, st)
	}
	return out
}

// Probe returns b's capability, probing once and caching the answer.
func (m *Manager) Probe(ctx context.Context, b sandbox.Backend) sandbox.Capability {
	return m.probe(ctx, b, false).capa
}

// probeAnswer is a capability and where it came from.
type probeAnswer struct {
	capa   sandbox.Capability
	at     time.Time
	cached bool // from Config.Probes
}

func (m *Manager) probe(ctx context.Context, b sandbox.Backend, force bool) probeAnswer {
	m.mu.Lock()
	a, ok := m.probed[b.Name()]
	m.mu.Unlock()
	if ok && !force {
		return a
	}
	// Concurrent first selections share one probe instead of each running
	// the backend's (possibly slow) real probe.
	v, _, _ := m.probing.Do(b.Name(), func() (any, error) {
		ctx := context.WithoutCancel(ctx)
		a, ok := probeAnswer{}, false
		if !force {
			a, ok = m.stored(ctx, b)
		}
		if !ok {
			a = m.probeNow(ctx, b)
		}
		m.mu.Lock()
		m.probed[b.Name()] = a
		m.mu.Unlock()
		return a, nil
	})
	return v.(probeAnswer)
}

// Key is the certification key of b as it is configured now.
func (m *Manager) Key(b sandbox.Backend, capa sandbox.Capability) cert.Key {
	return cert.Key{Backend: b.Name(), RuntimeVersion: capa.Version, Kernel: m.kernel, ConfigHash: capa.ConfigHash}
}

// coversGPUs reports whether b's certification covers GPU work (a record
// that left the GPU rows unprobed where a GPU exists does not).
func (m *Manager) coversGPUs(b sandbox.Backend, capa sandbox.Capability) bool {
	if m.certs == nil {
		return false
	}
	rec, err := m.certs.Cert(m.Key(b, capa))
	return err == nil && rec.CoversGPUs()
}

func (m *Manager) certified(b sandbox.Backend, capa sandbox.Capability) error {
	if m.certs == nil {
		return errors.New("not certified: no certification store")
	}
	k := m.Key(b, capa)
	rec, err := m.certs.Cert(k)
	if err != nil {
		return err
	}
	return rec.Check(k)
}
