package manager

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"

	"github.com/wovyr/wovyr/sandbox"
)

// resumingBackend is a fakeBackend that keeps paused sandboxes.
type resumingBackend struct {
	*fakeBackend
	paused  []string
	resumed []string
}

func (b *resumingBackend) Resume(_ context.Context, p sandbox.Paused, tenant string) (sandbox.Sandbox, error) {
	b.resumed = append(b.resumed, p.ID+"/"+tenant)
	return nil, nil
}

func (b *resumingBackend) Discard(_ context.Context, p sandbox.Paused) error {
	b.paused = slices.DeleteFunc(b.paused, func(id string) bool { return id == p.ID })
	return nil
}

func (b *resumingBackend) PausedSandboxes(context.Context) ([]sandbox.Paused, error) {
	return sandbox.PausedOf(b.name, func(string) ([]string, error) { return slices.Clone(b.paused), nil })
}

// TestResumeHoldsTheFloor: a paused sandbox comes back only through the
// floor a claim would meet, on the backend that saved it; ReconcilePaused
// discards what no session keeps, and only that.
func TestResumeHoldsTheFloor(t *testing.T) {
	kinds := []sandbox.WorkloadKind{sandbox.KindCommand, sandbox.KindSession}
	gv := &resumingBackend{fakeBackend: &fakeBackend{name: "gvisor", strength: sandbox.GVisor, kinds: kinds, available: true}, paused: []string{"a", "b", "c"}}
	ctr := &fakeBackend{name: "container", strength: sandbox.Container, kinds: kinds, available: true}
	certs := certMap{"container": passed("container"), "gvisor": passed("gvisor")}
	m, _ := New(Config{Backends: []sandbox.Backend{ctr, gv}, Kernel: "k", Certs: certs, Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	untrusted := sandbox.Policy{Trust: sandbox.Untrusted}
	if _, err := m.Resume(ctx, gv, sandbox.Policy{Trust: sandbox.Hostile}, sandbox.KindSession, sandbox.Paused{Backend: "gvisor", ID: "a"}, "acme"); !errors.Is(err, sandbox.FloorUnmet) {
		t.Fatalf("a resume below the policy's floor: %v", err)
	}
	if _, err := m.Resume(ctx, ctr, untrusted, sandbox.KindSession, sandbox.Paused{Backend: "gvisor", ID: "a"}, "acme"); sandbox.ClassOf(err) != sandbox.BadInput {
		t.Fatalf("a gvisor sandbox resumed on container: %v", err)
	}
	if len(gv.resumed) != 0 {
		t.Fatalf("refused resumes reached the backend: %v", gv.resumed)
	}
	if _, err := m.Resume(ctx, gv, untrusted, sandbox.KindSession, sandbox.Paused{Backend: "gvisor", ID: "a"}, "acme"); err != nil || !slices.Equal(gv.resumed, []string{"a/acme"}) {
		t.Fatalf("resume: %v %v", err, gv.resumed)
	}
	delete(certs, "gvisor")
	m, _ = New(Config{Backends: []sandbox.Backend{ctr, gv}, Kernel: "k", Certs: certs, Logger: slog.New(slog.DiscardHandler)})
	if _, err := m.Resume(ctx, gv, untrusted, sandbox.KindSession, sandbox.Paused{Backend: "gvisor", ID: "a"}, "acme"); !errors.Is(err, sandbox.FloorUnmet) {
		t.Fatalf("a resume on an uncertified backend: %v", err)
	}
	if err := m.ReconcilePaused(ctx, map[sandbox.Paused]bool{{Backend: "gvisor", ID: "b"}: true}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gv.paused, []string{"b"}) {
		t.Fatalf("after reconcile: %v, want the kept b only", gv.paused)
	}
}
