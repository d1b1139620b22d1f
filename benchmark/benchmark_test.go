package benchmark

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// TestMeasureRunsSetupUntimed: Setup runs before every round, warm-up
// rounds included, and its time is not the Subject's.
func TestMeasureRunsSetupUntimed(t *testing.T) {
	var log []string
	p := Pair{Name: "x",
		Setup:   func() error { log = append(log, "setup"); time.Sleep(20 * time.Millisecond); return nil },
		Subject: func() error { log = append(log, "subject"); return nil },
		Peer:    func() error { log = append(log, "peer"); return nil },
	}
	r, err := Measure(p, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"setup", "subject", "peer", "setup", "subject", "peer", "setup", "peer", "subject"}
	if !slices.Equal(log, want) {
		t.Fatalf("calls %v, want %v", log, want)
	}
	if r.Subject >= 20*time.Millisecond {
		t.Errorf("subject median %v includes the setup's 20ms", r.Subject)
	}
	boom := errors.New("boom")
	p.Setup = func() error { return boom }
	if _, err := Measure(p, 2, 0); !errors.Is(err, boom) {
		t.Errorf("setup error %v, want %v", err, boom)
	}
}

type fakeBackend struct {
	prepared, destroyed int
	fail                bool
}

type fakeSandbox struct{ b *fakeBackend }

func (b *fakeBackend) Name() string               { return "fake" }
func (b *fakeBackend) Strength() sandbox.Strength { return sandbox.Native }
func (b *fakeBackend) Kinds() []sandbox.WorkloadKind {
	return []sandbox.WorkloadKind{sandbox.KindCommand}
}
func (b *fakeBackend) Probe(context.Context) sandbox.Capability {
	return sandbox.Capability{Available: true}
}
func (s *fakeSandbox) Run(context.Context, *sandbox.Invocation) (*sandbox.Result, error) {
	return &sandbox.Result{}, nil
}
func (s *fakeSandbox) Destroy(context.Context) error { s.b.destroyed++; return nil }
func (b *fakeBackend) Prepare(context.Context, sandbox.Template) (sandbox.Sandbox, error) {
	if b.fail {
		return nil, errors.New("prepare failed")
	}
	b.prepared++
	return &fakeSandbox{b}, nil
}

// TestWarmHoldsAPoolsWorth: Refill keeps Size ready and destroys the used
// ones, so the number alive never exceeds Size+1; Close destroys the rest.
func TestWarmHoldsAPoolsWorth(t *testing.T) {
	b := &fakeBackend{}
	w := NewWarm(context.Background(), b, sandbox.Template{}, 3)
	if w.Take() != nil {
		t.Fatal("Take before Refill returned a sandbox")
	}
	for i := range 10 {
		if err := w.Refill(); err != nil {
			t.Fatal(err)
		}
		if alive := b.prepared - b.destroyed; alive != 3 {
			t.Fatalf("round %d: %d alive after Refill, want 3", i, alive)
		}
		if w.Take() == nil {
			t.Fatalf("round %d: no sandbox", i)
		}
	}
	if b.prepared != 12 || b.destroyed != 9 {
		t.Fatalf("prepared %d destroyed %d, want 12 and 9", b.prepared, b.destroyed)
	}
	b.fail = true
	if err := w.Refill(); err == nil {
		t.Fatal("Refill hid a Prepare failure")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if b.prepared != b.destroyed {
		t.Fatalf("after Close: prepared %d, destroyed %d", b.prepared, b.destroyed)
	}
}
