package manager

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/probecache"
	"github.com/wovyr/wovyr/sandbox"
)

// cachingBackend is a backend whose probe answers may be stored: the test
// sets what its key digests and what a real probe would answer now.
type cachingBackend struct {
	name     string
	strength sandbox.Strength
	key      string
	version  string // what a real probe reads now
	down     bool   // a real probe finds it unavailable
	adoptErr error

	mu      sync.Mutex
	probes  int
	adopted []sandbox.Capability
}

func (c *cachingBackend) Name() string               { return c.name }
func (c *cachingBackend) Strength() sandbox.Strength { return c.strength }
func (c *cachingBackend) Kinds() []sandbox.WorkloadKind {
	return []sandbox.WorkloadKind{sandbox.KindCommand}
}
func (c *cachingBackend) Probe(context.Context) sandbox.Capability {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.probes++
	if c.down {
		return sandbox.Capability{Reason: "runtime missing", Version: c.version}
	}
	return sandbox.Capability{Available: true, Version: c.version, ConfigHash: "h"}
}
func (c *cachingBackend) Prepare(context.Context, sandbox.Template) (sandbox.Sandbox, error) {
	return nil, errors.New("fake")
}
func (c *cachingBackend) ProbeKey() string { return c.key }
func (c *cachingBackend) Adopt(_ context.Context, capa sandbox.Capability) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.adopted = append(c.adopted, capa)
	return c.adoptErr
}

func (c *cachingBackend) counts() (probes, adopted int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.probes, len(c.adopted)
}

// memProbes is a ProbeCache in memory, shared by the "processes" (managers)
// of one test as the state store is.
type memProbes struct {
	mu   sync.Mutex
	recs map[[2]string]probecache.Record
	puts int
}

func newMemProbes() *memProbes { return &memProbes{recs: map[[2]string]probecache.Record{}} }

func (m *memProbes) CachedProbe(backend, key string) (probecache.Record, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.recs[[2]string{backend, key}]
	return r, ok
}

func (m *memProbes) PutProbe(r probecache.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.puts++
	m.recs[[2]string{r.Backend, r.Key}] = r
	return nil
}

// process is one wovyr command: a new manager over the shared store.
func process(t *testing.T, b sandbox.Backend, probes ProbeCache, kernel string, now time.Time) *Manager {
	t.Helper()
	m, err := New(Config{Backends: []sandbox.Backend{b}, Certs: certMap{"x": passed("x")}, Kernel: kernel,
		Probes: probes, Now: func() time.Time { return now },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var trusted = sandbox.Policy{Trust: sandbox.Trusted}

func TestStoredProbeIsReusedByTheNextProcess(t *testing.T) {
	b := &cachingBackend{name: "x", strength: sandbox.Native, key: "k1", version: "v1"}
	probes, t0 := newMemProbes(), time.Unix(1e9, 0)
	if _, err := process(t, b, probes, "k", t0).Select(context.Background(), trusted, sandbox.KindCommand); err != nil {
		t.Fatal(err)
	}
	if p, a := b.counts(); p != 1 || a != 0 || probes.puts != 1 {
		t.Fatalf("first process: %d probes, %d adopted, %d stored; want 1, 0, 1", p, a, probes.puts)
	}
	m := process(t, b, probes, "k", t0.Add(time.Hour))
	if _, err := m.Select(context.Background(), trusted, sandbox.KindCommand); err != nil {
		t.Fatal(err)
	}
	if p, a := b.counts(); p != 1 || a != 1 {
		t.Fatalf("second process: %d probes, %d adopted; want the stored answer adopted, no probe", p, a)
	}
	st := m.Detect(context.Background(), false)[0]
	if !st.Cached || !st.ProbedAt.Equal(t0) || !st.Certified {
		t.Fatalf("status %+v: want cached, probed at %v, certified", st, t0)
	}
	st = m.Detect(context.Background(), true)[0]
	if p, _ := b.counts(); p != 2 || st.Cached || probes.puts != 2 {
		t.Fatalf("Detect(force): %d probes, cached %v, %d stored; want a fresh probe, stored", p, st.Cached, probes.puts)
	}
}

// TestStoredProbeNeverHonoursAStaleCertification: the runtime changed (its
// file, so the key), and a fresh probe reads a version the certification
// is not for. Without the key in the cache, the stored answer's "v1" would
// have matched the certification.
func TestStoredProbeNeverHonoursAStaleCertification(t *testing.T) {
	b := &cachingBackend{name: "x", strength: sandbox.Native, key: "k1", version: "v1"}
	probes, t0 := newMemProbes(), time.Unix(1e9, 0)
	if _, err := process(t, b, probes, "k", t0).Select(context.Background(), trusted, sandbox.KindCommand); err != nil {
		t.Fatal(err)
	}
	b.key, b.version = "k2", "v2" // an upgrade
	_, err := process(t, b, probes, "k", t0.Add(time.Minute)).Select(context.Background(), trusted, sandbox.KindCommand)
	var fe *sandbox.FloorError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), `certified for runtime "v1", now "v2"`) {
		t.Fatalf("Select after the runtime changed: %v; want floor-unmet naming the stale certification", err)
	}
	if p, a := b.counts(); p != 2 || a != 0 {
		t.Fatalf("%d probes, %d adopted; want a fresh probe and nothing adopted", p, a)
	}
}

func TestStoredProbeIsVoided(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	for _, tc := range []struct {
		name   string
		change func(b *cachingBackend, kernel *string, now *time.Time)
	}{
		{"changed key (binary or config)", func(b *cachingBackend, _ *string, _ *time.Time) { b.key = "k2" }},
		{"other kernel", func(_ *cachingBackend, k *string, _ *time.Time) { *k = "k-new" }},
		{"older than the limit", func(_ *cachingBackend, _ *string, now *time.Time) { *now = t0.Add(DefaultProbeMaxAge + time.Second) }},
		{"from the future", func(_ *cachingBackend, _ *string, now *time.Time) { *now = t0.Add(-time.Second) }},
		{"not adopted", func(b *cachingBackend, _ *string, _ *time.Time) { b.adoptErr = errors.New("runtime gone") }},
		{"empty key", func(b *cachingBackend, _ *string, _ *time.Time) { b.key = "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &cachingBackend{name: "x", strength: sandbox.Native, key: "k1", version: "v1"}
			probes := newMemProbes()
			process(t, b, probes, "k", t0).Probe(context.Background(), b)
			kernel, now := "k", t0.Add(time.Minute)
			tc.change(b, &kernel, &now)
			process(t, b, probes, kernel, now).Probe(context.Background(), b)
			if p, _ := b.counts(); p != 2 {
				t.Fatalf("%d probes; want the stored answer voided and a fresh probe", p)
			}
		})
	}
}

// TestUnavailableIsReusedBriefly: an unavailable answer may be a passing
// failure; it is reused for a minute, not for a day.
func TestUnavailableIsReusedBriefly(t *testing.T) {
	b := &cachingBackend{name: "x", strength: sandbox.Native, key: "k1", version: "v1", down: true}
	probes, t0 := newMemProbes(), time.Unix(1e9, 0)
	process(t, b, probes, "k", t0).Probe(context.Background(), b)
	if c := process(t, b, probes, "k", t0.Add(30*time.Second)).Probe(context.Background(), b); c.Available {
		t.Fatal("stored unavailable answer came back available")
	}
	if p, a := b.counts(); p != 1 || a != 0 {
		t.Fatalf("within a minute: %d probes, %d adopted; want the stored answer, nothing to adopt", p, a)
	}
	b.down = false
	m := process(t, b, probes, "k", t0.Add(2*time.Minute))
	if _, err := m.Select(context.Background(), trusted, sandbox.KindCommand); err != nil {
		t.Fatalf("after a minute the backend is probed again and usable: %v", err)
	}
	if p, _ := b.counts(); p != 2 {
		t.Fatalf("%d probes; want 2", p)
	}
}

// TestNeverProbedIsNeverSelected: only the manager writes the cache, after
// a real probe; an answer stored for another key (another configuration,
// or written by anything else) is not this backend's.
func TestNeverProbedIsNeverSelected(t *testing.T) {
	b := &cachingBackend{name: "x", strength: sandbox.Native, key: "k1", version: "v1", down: true}
	probes := newMemProbes()
	probes.recs[[2]string{"x", "other"}] = probecache.Record{Backend: "x", Key: "other", Kernel: "k", At: time.Unix(1e9, 0),
		Capability: sandbox.Capability{Available: true, Version: "v1", ConfigHash: "h"}}
	_, err := process(t, b, probes, "k", time.Unix(1e9, 60)).Select(context.Background(), trusted, sandbox.KindCommand)
	if sandbox.ClassOf(err) != sandbox.FloorUnmet || !strings.Contains(err.Error(), "runtime missing") {
		t.Fatalf("Select: %v; want floor-unmet from the real probe", err)
	}
	if p, a := b.counts(); p != 1 || a != 0 {
		t.Fatalf("%d probes, %d adopted; want the real probe only", p, a)
	}
}

// TestCachedProbeKeepsCertificationKey: the certification is checked
// against the stored capability exactly as against a fresh one.
func TestCachedProbeKeepsCertificationKey(t *testing.T) {
	b := &cachingBackend{name: "x", strength: sandbox.Native, key: "k1", version: "v1"}
	probes, t0 := newMemProbes(), time.Unix(1e9, 0)
	process(t, b, probes, "k", t0).Probe(context.Background(), b)
	m := process(t, b, probes, "k", t0.Add(time.Minute))
	capa := m.Probe(context.Background(), b)
	if got, want := m.Key(b, capa), (cert.Key{Backend: "x", RuntimeVersion: "v1", Kernel: "k", ConfigHash: "h"}); got != want {
		t.Fatalf("key from the stored answer %+v, want %+v", got, want)
	}
}
