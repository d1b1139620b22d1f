package battery

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/sandbox"
)

// fake is a backend whose "weakness" flips what probes observe.
type fake struct {
	weak      Weakness
	available bool
}

func (f *fake) Name() string                  { return "native" }
func (f *fake) Strength() sandbox.Strength    { return sandbox.Native }
func (f *fake) Kinds() []sandbox.WorkloadKind { return []sandbox.WorkloadKind{sandbox.KindCommand} }
func (f *fake) Probe(context.Context) sandbox.Capability {
	return sandbox.Capability{Available: f.available, Version: "v", ConfigHash: "h" + string(f.weak), Reason: "gone"}
}
func (f *fake) Prepare(context.Context, sandbox.Template) (sandbox.Sandbox, error) {
	return nil, errors.New("unused")
}
func (f *fake) Weakened(w Weakness) (sandbox.Backend, error) {
	if w == "unsupported" {
		return nil, errors.New("no such configuration")
	}
	return &fake{weak: w, available: true}, nil
}

// probe reports secure unless the target carries weakness w — or, with
// blind set, always secure (a probe that cannot fail).
func probe(id int, w Weakness, blind bool) Probe {
	return Probe{ID: id, Weakness: w, Run: func(_ context.Context, t Target) Observation {
		weak := t.Backend.(*fake).weak
		return Observation{Observed: "weak=" + string(weak), Secure: blind || weak != w}
	}}
}

func suite(probes ...Probe) Suite {
	na := map[int]string{}
	for _, r := range catalogue {
		if r.appliesTo("native") {
			na[r.ID] = "out of scope for this test"
		}
	}
	for _, p := range probes {
		delete(na, p.ID)
	}
	return Suite{Target: Target{Backend: &fake{available: true}}, Probes: probes, NotApplicable: na, Kernel: "k"}
}

func TestControlsMustFlag(t *testing.T) {
	rec, err := Run(context.Background(), suite(probe(50, NoPidsLimit, false), probe(51, NoMemoryLimit, false)), nil)
	if err != nil || !rec.Passed {
		t.Fatalf("honest probes: passed=%v err=%v failed=%v", rec.Passed, err, rec.Failed())
	}
	rec, _ = Run(context.Background(), suite(probe(50, NoPidsLimit, false), probe(51, NoMemoryLimit, true)), nil)
	if rec.Passed || len(rec.Failed()) != 1 || !strings.Contains(rec.Failed()[0], "#51 Memory (positive control did not flag)") {
		t.Fatalf("a probe that cannot fail certified: %v", rec.Failed())
	}
}

func TestUnsupportedControlFails(t *testing.T) {
	rec, _ := Run(context.Background(), suite(probe(50, "unsupported", false)), nil)
	if rec.Passed {
		t.Fatal("a probe without a runnable control certified")
	}
}

func TestUncoveredRowFails(t *testing.T) {
	s := suite(probe(50, NoPidsLimit, false))
	delete(s.NotApplicable, 60) // applies to native, no probe, no reason
	rec, _ := Run(context.Background(), s, nil)
	if rec.Passed || !strings.Contains(strings.Join(rec.Failed(), ","), "#60 Orphans") {
		t.Fatalf("an applicable row without a probe certified: %v", rec.Failed())
	}
}

func TestUnavailableBackendIsNotCertified(t *testing.T) {
	s := suite(probe(50, NoPidsLimit, false))
	s.Target.Backend = &fake{available: false}
	if _, err := Run(context.Background(), s, nil); err == nil {
		t.Fatal("certified an unavailable backend")
	}
}

func TestCatalogueLetters(t *testing.T) {
	rows := map[int]Row{}
	for _, r := range Catalogue() {
		rows[r.ID] = r
	}
	if len(rows) != 105 {
		t.Fatalf("%d rows, want 105", len(rows))
	}
	for _, c := range []struct {
		id      int
		backend string
		want    bool
	}{{1, "native", true}, {1, "wasm", false}, {61, "wasm", true}, {61, "native", false},
		{18, "container", true}, {18, "native", false}, {6, "wasm", true}, {86, "gvisor", true}, {86, "container", false},
		{95, "native", true}, {95, "microvm", false}, {96, "container", true}, {96, "native", false},
		{98, "gvisor", true}, {98, "microvm", true}, {98, "container", false},
		{99, "plugin", true}, {99, "wasm", false}, {104, "plugin", true}, {105, "plugin", true}, {105, "wasm", false}, {1, "plugin", false}, {3, "plugin", false}} {
		if got := rows[c.id].appliesTo(c.backend); got != c.want {
			t.Errorf("row %d applies to %s = %v, want %v", c.id, c.backend, got, c.want)
		}
	}
}

// Regression for issue #26 item 1: certifying a backend whose template was
// missing recorded every probe as failed ("this machine is insecure"). A
// missing prerequisite now runs no probe and yields no record.
func TestMissingPrerequisiteRunsNothing(t *testing.T) {
	ran := false
	s := suite(Probe{ID: 50, Weakness: NoPidsLimit, Run: func(context.Context, Target) Observation {
		ran = true
		return Observation{Secure: true}
	}})
	s.Prerequisites = []Prerequisite{
		{What: "here", Check: func() error { return nil }},
		{What: "template busybox", Check: func() error {
			return errors.New("no template \"busybox\" to test with: build it with `wovyr image build busybox`")
		}},
	}
	rec, err := Run(context.Background(), s, nil)
	var nr *NotRunError
	want := "battery not run for native: no template \"busybox\" to test with: build it with `wovyr image build busybox`"
	if !errors.As(err, &nr) || err.Error() != want || ran || len(rec.Outcomes) != 0 {
		t.Fatalf("err %v (ran %v, %d outcomes), want %q and nothing run", err, ran, len(rec.Outcomes), want)
	}
	s.Target.Backend = &fake{available: false}
	if _, err := Run(context.Background(), s, nil); !errors.As(err, &nr) || err.Error() != "battery not run for native: unavailable: gone" {
		t.Fatalf("unavailable backend: %v", err)
	}
}
