package manager

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/sandbox"
)

// gpuBackend is a fakeBackend that can give GPUs (support nil) or says why
// not; accel is its probe's Accel.
type gpuBackend struct {
	fakeBackend
	support error
	accel   string
}

func (g *gpuBackend) GPUSupport(context.Context) error { return g.support }
func (g *gpuBackend) Probe(ctx context.Context) sandbox.Capability {
	c := g.fakeBackend.Probe(ctx)
	c.Accel = g.accel
	return c
}

// plainBackend gives no GPUs at all (no sandbox.GPUProvider).
type plainBackend struct {
	fakeBackend
	accel string
}

func (p *plainBackend) Probe(ctx context.Context) sandbox.Capability {
	c := p.fakeBackend.Probe(ctx)
	c.Accel = p.accel
	return c
}

// gpuNode is this development node as GPU selection sees it: native and a
// container that can give devices, wasm that cannot, gVisor whose runsc
// has no usable nvproxy, a TCG microVM (no VFIO without KVM). Every backend is
// certified.
func gpuNode(t *testing.T, floors sandbox.Floors) *Manager {
	cmd := []sandbox.WorkloadKind{sandbox.KindCommand}
	bs := []sandbox.Backend{
		&gpuBackend{fakeBackend: fakeBackend{name: "native", strength: sandbox.Native, kinds: cmd, available: true}},
		&gpuBackend{fakeBackend: fakeBackend{name: "wasm", strength: sandbox.Wasm, kinds: []sandbox.WorkloadKind{sandbox.KindWasm}, available: true},
			support: errors.New("WebAssembly has no GPU access")},
		&gpuBackend{fakeBackend: fakeBackend{name: "container", strength: sandbox.Container, kinds: cmd, available: true}},
		&gpuBackend{fakeBackend: fakeBackend{name: "gvisor", strength: sandbox.GVisor, kinds: cmd, available: true}, accel: "systrap",
			support: errors.New("runsc nvproxy unavailable: no NVIDIA driver on this node")},
		&gpuBackend{fakeBackend: fakeBackend{name: "microvm", strength: sandbox.MicroVM, kinds: cmd, available: true}, accel: "tcg",
			support: errors.New("VFIO passthrough needs KVM (accel tcg here)")},
	}
	certs := certMap{}
	for _, b := range bs {
		certs[b.Name()] = passed(b.Name())
	}
	m, err := New(Config{Backends: bs, Certs: certs, Kernel: "k", Floors: floors, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestGPUFloors: GPU work goes only to a backend that can give devices at
// or above its floor, and otherwise is floor-unmet with the reason per
// backend, never a container for untrusted code.
func TestGPUFloors(t *testing.T) {
	ctx := context.Background()
	m := gpuNode(t, sandbox.Floors{})
	for _, c := range []struct {
		trust sandbox.TrustClass
		kind  sandbox.WorkloadKind
		want  string // backend, or the FloorError's text
	}{
		{sandbox.Trusted, sandbox.KindCommand, "native"},
		{sandbox.Internal, sandbox.KindCommand, "container"},
		{sandbox.Untrusted, sandbox.KindCommand, "floor-unmet: no usable backend at or above gvisor for a command workload; " +
			"gvisor: no GPUs: runsc nvproxy unavailable: no NVIDIA driver on this node; " +
			"microvm: no GPUs: VFIO passthrough needs KVM (accel tcg here)"},
		{sandbox.Hostile, sandbox.KindCommand, "floor-unmet: no usable backend at or above microvm for a command workload; " +
			"microvm: no GPUs: VFIO passthrough needs KVM (accel tcg here)"},
		{sandbox.Trusted, sandbox.KindWasm, "floor-unmet: no usable backend at or above native for a wasm workload; " +
			"native: does not run wasm workloads; wasm: no GPUs: WebAssembly has no GPU access; container: does not run wasm workloads; " +
			"gvisor: does not run wasm workloads; microvm: does not run wasm workloads"},
	} {
		b, err := m.SelectFor(ctx, sandbox.Policy{Trust: c.trust}, c.kind, 1)
		got := ""
		if err != nil {
			got = err.Error()
			if !errors.Is(err, sandbox.FloorUnmet) {
				t.Errorf("%s/%s: %v is not floor-unmet", c.trust, c.kind, err)
			}
		} else {
			got = b.Name()
		}
		if got != c.want {
			t.Errorf("%s %s with a GPU:\n got  %s\n want %s", c.trust, c.kind, got, c.want)
		}
	}
	// Without a GPU the same node runs untrusted code on gVisor.
	if b, err := m.SelectFor(ctx, sandbox.Policy{Trust: sandbox.Untrusted}, sandbox.KindCommand, 0); err != nil || b.Name() != "gvisor" {
		t.Fatalf("untrusted without a GPU: %v %v", b, err)
	}
}

// TestGPUNeverLowersAFloor: an operator override that lowers the untrusted
// floor to container does not let GPU work of untrusted code into a
// container (nor native run an internal tenant's GPU work).
func TestGPUNeverLowersAFloor(t *testing.T) {
	floors, err := sandbox.Floors{}.WithFloor(sandbox.Untrusted, sandbox.Container, true)
	if err != nil {
		t.Fatal(err)
	}
	m := gpuNode(t, floors)
	ctx := context.Background()
	if b, err := m.SelectFor(ctx, sandbox.Policy{Trust: sandbox.Untrusted}, sandbox.KindCommand, 0); err != nil || b.Name() != "container" {
		t.Fatalf("untrusted without a GPU under the override: %v %v", b, err)
	}
	_, err = m.SelectFor(ctx, sandbox.Policy{Trust: sandbox.Untrusted}, sandbox.KindCommand, 2)
	var fe *sandbox.FloorError
	if !errors.As(err, &fe) || fe.Required != sandbox.GVisor || strings.Contains(err.Error(), "container") {
		t.Fatalf("untrusted GPU work under the override: %v, want floor-unmet at gvisor", err)
	}
	if b, err := m.SelectFor(ctx, sandbox.Policy{Trust: sandbox.Internal, Preference: sandbox.Native}, sandbox.KindCommand, 1); err != nil || b.Name() != "container" {
		t.Fatalf("internal GPU work preferring native: %v %v, want container", b, err)
	}
}

// TestGPUWorkNeedsGPURowsProbed: a backend whose certification left the
// GPU rows unprobed where a GPU exists (cert.GPUUnprobed) stays certified
// for other work but is given no GPU work, which then goes to the next
// backend that qualifies.
func TestGPUWorkNeedsGPURowsProbed(t *testing.T) {
	m := gpuNode(t, sandbox.Floors{})
	certs := m.certs.(certMap)
	rec := certs["native"]
	rec.Outcomes = append(rec.Outcomes, cert.Outcome{ID: 95, Name: "GPU: assigned only", Why: cert.GPUUnprobed})
	certs["native"] = rec
	ctx := context.Background()
	if b, err := m.SelectFor(ctx, sandbox.Policy{Trust: sandbox.Trusted}, sandbox.KindCommand, 0); err != nil || b.Name() != "native" {
		t.Fatalf("trusted without a GPU: %v %v, want native", b, err)
	}
	if b, err := m.SelectFor(ctx, sandbox.Policy{Trust: sandbox.Trusted}, sandbox.KindCommand, 1); err != nil || b.Name() != "container" {
		t.Fatalf("trusted with a GPU: %v %v, want container (native's record does not cover GPUs)", b, err)
	}
	certs["container"] = func() cert.Record {
		r := certs["container"]
		r.Outcomes = append(r.Outcomes, cert.Outcome{ID: 96, Name: "GPU: residue", Why: cert.GPUUnprobed})
		return r
	}()
	_, err := m.SelectFor(ctx, sandbox.Policy{Trust: sandbox.Internal}, sandbox.KindCommand, 1)
	if !errors.Is(err, sandbox.FloorUnmet) || !strings.Contains(err.Error(), "container: certified, but not for GPU work") {
		t.Fatalf("internal with a GPU on unprobed rows: %v", err)
	}
}

// TestGPUNeedsAProvider: a backend that is no sandbox.GPUProvider is never
// given GPU work, at any strength, and says so.
func TestGPUNeedsAProvider(t *testing.T) {
	cmd := []sandbox.WorkloadKind{sandbox.KindCommand}
	b := &plainBackend{fakeBackend: fakeBackend{name: "microvm", strength: sandbox.MicroVM, kinds: cmd, available: true}, accel: "kvm"}
	m, err := New(Config{Backends: []sandbox.Backend{b}, Certs: certMap{"microvm": passed("microvm")}, Kernel: "k", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.SelectFor(context.Background(), sandbox.Policy{Trust: sandbox.Hostile}, sandbox.KindCommand, 1)
	if want := "floor-unmet: no usable backend at or above microvm for a command workload; microvm: cannot give a sandbox GPU devices"; err == nil || err.Error() != want {
		t.Fatalf("%v\nwant %s", err, want)
	}
	if got, err := m.SelectFor(context.Background(), sandbox.Policy{Trust: sandbox.Hostile}, sandbox.KindCommand, 0); err != nil || got != b {
		t.Fatalf("without a GPU: %v %v", got, err)
	}
}
