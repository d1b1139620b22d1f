package manager

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/sandbox"
)

// fakeBackend is a backend whose availability the test sets.
type fakeBackend struct {
	name      string
	strength  sandbox.Strength
	kinds     []sandbox.WorkloadKind
	available bool
	egress    bool
	prepared  int
}

func (f *fakeBackend) Name() string                  { return f.name }
func (f *fakeBackend) Strength() sandbox.Strength    { return f.strength }
func (f *fakeBackend) Kinds() []sandbox.WorkloadKind { return f.kinds }
func (f *fakeBackend) Probe(context.Context) sandbox.Capability {
	c := sandbox.Capability{Available: f.available, Version: "v1", ConfigHash: "h", Egress: f.egress}
	if !f.available {
		c.Reason = "runtime missing"
	}
	return c
}
func (f *fakeBackend) Prepare(context.Context, sandbox.Template) (sandbox.Sandbox, error) {
	f.prepared++
	return nil, errors.New("fake")
}

// certMap certifies the backends it holds, for kernel "k".
type certMap map[string]cert.Record

func (c certMap) Cert(k cert.Key) (cert.Record, error) {
	var recs []cert.Record
	for _, r := range c {
		recs = append(recs, r)
	}
	return cert.Find(recs, k)
}

func passed(name string) cert.Record {
	return cert.Record{Key: cert.Key{Backend: name, RuntimeVersion: "v1", Kernel: "k", ConfigHash: "h"}, Passed: true,
		Outcomes: []cert.Outcome{{ID: 1, Name: "p", Applies: true, Pass: true, ControlFlagged: true}}}
}

// state of one backend in a combination.
type state int

const (
	usable state = iota
	unavailable
	uncertified
)

// TestSelectNeverLowersTheFloor walks every combination of backend states
// (usable, unavailable, uncertified for each of the five), trust class,
// preference and explicit floor, and checks Select against the rule
// directly: the result is the weakest usable backend at or above
// max(preference, floor, trust floor), or a floor error naming every
// backend at or above it.
func TestSelectNeverLowersTheFloor(t *testing.T) {
	names := map[sandbox.Strength]string{}
	for _, s := range sandbox.Strengths {
		names[s] = s.String()
	}
	prefs := append([]sandbox.Strength{0}, sandbox.Strengths...)
	cases := 0
	for combo := 0; combo < 243; combo++ {
		states := map[sandbox.Strength]state{}
		var backends []sandbox.Backend
		certs := certMap{}
		c := combo
		for _, s := range sandbox.Strengths {
			st := state(c % 3)
			c /= 3
			states[s] = st
			backends = append(backends, &fakeBackend{name: names[s], strength: s,
				kinds: []sandbox.WorkloadKind{sandbox.KindCommand}, available: st != unavailable})
			if st != uncertified {
				certs[names[s]] = passed(names[s])
			}
		}
		m, err := New(Config{Backends: backends, Certs: certs, Kernel: "k", Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		for _, trust := range sandbox.TrustClasses {
			for _, pref := range prefs {
				for _, floor := range prefs {
					cases++
					p := sandbox.Policy{Trust: trust, Preference: pref, Floor: floor}
					required := max(sandbox.DefaultFloor(trust), pref, floor)
					var want sandbox.Strength
					for _, s := range sandbox.Strengths {
						if s >= required && states[s] == usable {
							want = s
							break
						}
					}
					got, err := m.Select(context.Background(), p, sandbox.KindCommand)
					if want != 0 {
						if err != nil || got.Strength() != want {
							t.Fatalf("combo %d policy %+v: got %v %v, want %s", combo, p, got, err, want)
						}
						continue
					}
					var fe *sandbox.FloorError
					if !errors.As(err, &fe) || !errors.Is(err, sandbox.FloorUnmet) || got != nil {
						t.Fatalf("combo %d policy %+v: got %v %v, want floor-unmet", combo, p, got, err)
					}
					if fe.Required != required || len(fe.Rejections) != int(sandbox.MicroVM-required)+1 {
						t.Fatalf("combo %d policy %+v: floor error %+v does not name every backend from %s up", combo, p, fe, required)
					}
					for _, r := range fe.Rejections {
						if r.Strength < required || r.Reason == "" {
							t.Fatalf("rejection %+v below the requirement or without a reason", r)
						}
					}
				}
			}
		}
	}
	if cases != 243*4*6*6 {
		t.Fatalf("ran %d cases", cases)
	}
}

func TestSelectSkipsWrongKindAndEgress(t *testing.T) {
	wasm := &fakeBackend{name: "wasm", strength: sandbox.Wasm, kinds: []sandbox.WorkloadKind{sandbox.KindWasm}, available: true}
	ctr := &fakeBackend{name: "container", strength: sandbox.Container, kinds: []sandbox.WorkloadKind{sandbox.KindCommand, sandbox.KindWasm}, available: true}
	vm := &fakeBackend{name: "microvm", strength: sandbox.MicroVM, kinds: []sandbox.WorkloadKind{sandbox.KindCommand}, available: true, egress: true}
	m, _ := New(Config{Backends: []sandbox.Backend{vm, ctr, wasm}, Kernel: "k", Logger: slog.New(slog.DiscardHandler),
		Certs: certMap{"wasm": passed("wasm"), "container": passed("container"), "microvm": passed("microvm")}})
	ctx := context.Background()
	if b, _ := m.Select(ctx, sandbox.Policy{Trust: sandbox.Internal}, sandbox.KindCommand); b != ctr {
		t.Fatalf("command at internal: got %v, want container (wasm takes no commands)", b)
	}
	if b, _ := m.Select(ctx, sandbox.Policy{Trust: sandbox.Internal}, sandbox.KindWasm); b != wasm {
		t.Fatalf("wasm at internal: got %v, want wasm", b)
	}
	allow := netpolicy.Policy{Allow: []netpolicy.Rule{{Host: "api.example", Ports: []uint16{443}}}}
	if b, _ := m.Select(ctx, sandbox.Policy{Trust: sandbox.Internal, Network: allow}, sandbox.KindCommand); b != vm {
		t.Fatalf("allowlist: got %v, want microvm, the only backend enforcing egress", b)
	}
}

// TestSessionSelectionKeepsTheFloor: a session goes to the weakest
// backend that holds sessions at or above the floor, never below it; a
// stronger backend without sessions is named as such when none qualifies.
func TestSessionSelectionKeepsTheFloor(t *testing.T) {
	native := &fakeBackend{name: "native", strength: sandbox.Native, kinds: []sandbox.WorkloadKind{sandbox.KindCommand}, available: true}
	ctr := &fakeBackend{name: "container", strength: sandbox.Container, kinds: []sandbox.WorkloadKind{sandbox.KindCommand, sandbox.KindSession}, available: true}
	gv := &fakeBackend{name: "gvisor", strength: sandbox.GVisor, kinds: []sandbox.WorkloadKind{sandbox.KindCommand}, available: true}
	m, _ := New(Config{Backends: []sandbox.Backend{native, ctr, gv}, Kernel: "k", Logger: slog.New(slog.DiscardHandler),
		Certs: certMap{"native": passed("native"), "container": passed("container"), "gvisor": passed("gvisor")}})
	ctx := context.Background()
	if b, err := m.Select(ctx, sandbox.Policy{Trust: sandbox.Trusted}, sandbox.KindSession); b != ctr {
		t.Fatalf("trusted session: %v %v, want container (native holds none)", b, err)
	}
	_, err := m.Select(ctx, sandbox.Policy{Trust: sandbox.Untrusted}, sandbox.KindSession)
	want := "floor-unmet: no usable backend at or above gvisor for a session workload; gvisor: does not run session workloads"
	if err == nil || err.Error() != want {
		t.Fatalf("untrusted session: %v, want %s", err, want)
	}
}

func TestFloorErrorNamesEachStrongerBackend(t *testing.T) {
	var buf bytes.Buffer
	native := &fakeBackend{name: "native", strength: sandbox.Native, kinds: []sandbox.WorkloadKind{sandbox.KindCommand}, available: true}
	gv := &fakeBackend{name: "gvisor", strength: sandbox.GVisor, kinds: []sandbox.WorkloadKind{sandbox.KindCommand}}
	vm := &fakeBackend{name: "microvm", strength: sandbox.MicroVM, kinds: []sandbox.WorkloadKind{sandbox.KindCommand}, available: true}
	m, _ := New(Config{Backends: []sandbox.Backend{native, gv, vm}, Kernel: "k", Certs: certMap{"native": passed("native")},
		Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	_, err := m.Select(context.Background(), sandbox.Policy{Trust: sandbox.Untrusted}, sandbox.KindCommand)
	want := "floor-unmet: no usable backend at or above gvisor for a command workload; gvisor: unavailable: runtime missing; microvm: not certified (run wovyr certify --backend microvm)"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	if native.prepared+gv.prepared+vm.prepared != 0 {
		t.Fatal("a refused selection prepared a sandbox")
	}
	if log := buf.String(); !strings.Contains(log, "select refused") || !strings.Contains(log, "trust=untrusted") || !strings.Contains(log, "required=gvisor") {
		t.Fatalf("decision not logged with its inputs: %s", log)
	}
}

func TestCertificationMustMatchKey(t *testing.T) {
	b := &fakeBackend{name: "native", strength: sandbox.Native, kinds: []sandbox.WorkloadKind{sandbox.KindCommand}, available: true}
	for name, mut := range map[string]func(*cert.Record){
		"runtime upgraded": func(r *cert.Record) { r.RuntimeVersion = "v0" },
		"kernel changed":   func(r *cert.Record) { r.Kernel = "other" },
		"config changed":   func(r *cert.Record) { r.ConfigHash = "old" },
		"probe failed": func(r *cert.Record) {
			r.Outcomes = append(r.Outcomes, cert.Outcome{ID: 50, Name: "fork bomb", Applies: true})
		},
		"control silent": func(r *cert.Record) {
			r.Outcomes = append(r.Outcomes, cert.Outcome{ID: 51, Name: "memory", Applies: true, Pass: true})
		},
	} {
		rec := passed("native")
		mut(&rec)
		m, _ := New(Config{Backends: []sandbox.Backend{b}, Kernel: "k", Certs: certMap{"native": rec}, Logger: slog.New(slog.DiscardHandler)})
		_, err := m.Select(context.Background(), sandbox.Policy{Trust: sandbox.Trusted}, sandbox.KindCommand)
		if !errors.Is(err, sandbox.FloorUnmet) {
			t.Errorf("%s: selected anyway (%v)", name, err)
		}
		if name == "probe failed" && !strings.Contains(fmt.Sprint(err), "#50 fork bomb") {
			t.Errorf("failed probe not named: %v", err)
		}
	}
}

func TestFloorsRaiseButNeverSilentlyLower(t *testing.T) {
	f, err := sandbox.Floors{}.WithFloor(sandbox.Trusted, sandbox.Container, false)
	if err != nil || f.Of(sandbox.Trusted) != sandbox.Container || f.Of(sandbox.Internal) != sandbox.Wasm {
		t.Fatalf("raise: %v %v", f.Of(sandbox.Trusted), err)
	}
	if _, err := (sandbox.Floors{}).WithFloor(sandbox.Untrusted, sandbox.Container, false); !errors.Is(err, sandbox.ErrFloorLowered) {
		t.Fatalf("lowering without override: %v", err)
	}
	if f, err := (sandbox.Floors{}).WithFloor(sandbox.Untrusted, sandbox.Container, true); err != nil || f.Of(sandbox.Untrusted) != sandbox.Container {
		t.Fatalf("explicit override: %v", err)
	}
}

func TestDuplicateBackendRefused(t *testing.T) {
	a := &fakeBackend{name: "x", strength: sandbox.Native}
	if _, err := New(Config{Backends: []sandbox.Backend{a, a}}); err == nil {
		t.Fatal("duplicate accepted")
	}
}

func BenchmarkSelect(b *testing.B) {
	var backends []sandbox.Backend
	certs := certMap{}
	for _, s := range sandbox.Strengths {
		backends = append(backends, &fakeBackend{name: s.String(), strength: s, kinds: []sandbox.WorkloadKind{sandbox.KindCommand}, available: true})
		certs[s.String()] = passed(s.String())
	}
	m, _ := New(Config{Backends: backends, Certs: certs, Kernel: "k", Logger: slog.New(slog.DiscardHandler)})
	p := sandbox.Policy{Trust: sandbox.Untrusted}
	ctx := context.Background()
	for b.Loop() {
		if _, err := m.Select(ctx, p, sandbox.KindCommand); err != nil {
			b.Fatal(err)
		}
	}
}

// countingBackend counts probes and holds each one until released.
type countingBackend struct {
	fakeBackend
	probes  atomic.Int32
	release chan struct{}
}

func (c *countingBackend) Probe(ctx context.Context) sandbox.Capability {
	c.probes.Add(1)
	<-c.release
	return c.fakeBackend.Probe(ctx)
}

func TestConcurrentSelectsShareOneProbe(t *testing.T) {
	b := &countingBackend{fakeBackend: fakeBackend{name: "native", strength: sandbox.Native, kinds: []sandbox.WorkloadKind{sandbox.KindCommand}, available: true},
		release: make(chan struct{})}
	m, _ := New(Config{Backends: []sandbox.Backend{b}, Kernel: "k", Certs: certMap{"native": passed("native")}, Logger: slog.New(slog.DiscardHandler)})
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if _, err := m.Select(context.Background(), sandbox.Policy{Trust: sandbox.Trusted}, sandbox.KindCommand); err != nil {
				t.Error(err)
			}
		})
	}
	time.Sleep(50 * time.Millisecond) // let every Select reach the probe
	close(b.release)
	wg.Wait()
	if n := b.probes.Load(); n != 1 {
		t.Fatalf("%d probes for 16 concurrent first selections, want 1", n)
	}
}

// TestHoldsNamesOnlyItsBackend: a session's backend holds it while it is
// usable at or above its policy's requirement; otherwise the floor error
// names that backend alone, even where another would qualify.
func TestHoldsNamesOnlyItsBackend(t *testing.T) {
	kinds := []sandbox.WorkloadKind{sandbox.KindCommand, sandbox.KindSession}
	ctr := &fakeBackend{name: "container", strength: sandbox.Container, kinds: kinds, available: true}
	gv := &fakeBackend{name: "gvisor", strength: sandbox.GVisor, kinds: kinds, available: true}
	certs := certMap{"container": passed("container"), "gvisor": passed("gvisor")}
	m, _ := New(Config{Backends: []sandbox.Backend{ctr, gv}, Kernel: "k", Certs: certs, Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	if err := m.Holds(ctx, ctr, sandbox.Policy{Trust: sandbox.Internal}, sandbox.KindSession); err != nil {
		t.Fatalf("certified container, internal: %v", err)
	}
	for _, c := range []struct {
		p    sandbox.Policy
		want string
	}{
		{sandbox.Policy{Trust: sandbox.Untrusted}, "floor-unmet: no usable backend at or above gvisor for a session workload; container: is container, below the gvisor this policy requires"},
		{sandbox.Policy{Trust: sandbox.Internal, Floor: sandbox.MicroVM}, "floor-unmet: no usable backend at or above microvm for a session workload; container: is container, below the microvm this policy requires"},
	} {
		if err := m.Holds(ctx, ctr, c.p, sandbox.KindSession); err == nil || err.Error() != c.want {
			t.Errorf("%+v: %v\nwant %s", c.p, err, c.want)
		}
	}
	delete(certs, "container")
	m, _ = New(Config{Backends: []sandbox.Backend{ctr, gv}, Kernel: "k", Certs: certs, Logger: slog.New(slog.DiscardHandler)})
	err := m.Holds(ctx, ctr, sandbox.Policy{Trust: sandbox.Internal}, sandbox.KindSession)
	want := "floor-unmet: no usable backend at or above wasm for a session workload; container: not certified (run wovyr certify --backend container)"
	if !errors.Is(err, sandbox.FloorUnmet) || err.Error() != want {
		t.Fatalf("uncertified: %v\nwant %s", err, want)
	}
}
