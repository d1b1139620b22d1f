// Package battery is the escape and isolation battery that certifies a
// backend (DESIGN.md §6): it runs each probe of the catalogue that applies
// to the backend, in fresh sandboxes, against the exact secure outcome, and
// runs it again against a deliberately weakened configuration of the same
// backend — the positive control — which must report the weakness. A probe
// whose control does not flag proves nothing, and fails certification.
//
// The in-sandbox half of each probe lives in package prober (compiled into
// the static wovyr-guest binary); this package drives it and judges.
package battery

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/sandbox"
)

// Row is one catalogue entry.
type Row struct {
	ID       int
	Name     string
	Backends string // BATTERY.md's letters: "L", "all", "W", "C,G", …
}

// letters maps backend names to BATTERY.md's letters; "plugin" is the
// component plugin host (package plugin), P.
var letters = map[string]string{"native": "N", "wasm": "W", "container": "C", "gvisor": "G", "microvm": "M", "plugin": "P"}

// appliesTo reports whether row r names backend.
func (r Row) appliesTo(backend string) bool {
	l := letters[backend]
	for _, part := range strings.Split(r.Backends, ",") {
		switch p := strings.TrimSpace(part); {
		case p == "all", p == l:
			return true
		case p == "L" && l != "W" && l != "P" && l != "":
			return true
		}
	}
	return false
}

// Catalogue returns the rows, in order.
func Catalogue() []Row { return append([]Row(nil), catalogue...) }

// Weakness names a deliberately weakened configuration for a positive
// control. Backends under certification implement Weakener for the ones
// that make sense for them.
type Weakness string

// Weaknesses used by the probes.
const (
	NoPidsLimit   Weakness = "no-pids-limit"
	NoMemoryLimit Weakness = "no-memory-limit"
	NoDiskQuota   Weakness = "no-disk-quota"
	NoRlimits     Weakness = "no-rlimits"
	NoDeadline    Weakness = "no-deadline"
	NoOutputCap   Weakness = "no-output-cap"
	KeepOrphans   Weakness = "keep-orphans"
	HostNetwork   Weakness = "host-network"
	InheritEnv    Weakness = "inherit-env"
	RunAsRoot     Weakness = "run-as-root"
	SharedUID     Weakness = "shared-uid"
	// TraceStopAsExit: the job's waiter takes the leader's ptrace-stop
	// for its exit (wovyr before issue #25 item 1's fix), for row 94.
	TraceStopAsExit Weakness = "trace-stop-as-exit"
	// PausedAnyTenant: a paused sandbox resumes for whoever asks, as if
	// its record named no tenant, for row 98.
	PausedAnyTenant Weakness = "paused-any-tenant"
)

// Weakener returns a copy of a backend with one weakness, for positive
// controls only. The copy's Capability.ConfigHash must differ, so a
// weakened backend can never carry the real backend's certification.
type Weakener interface {
	Weakened(w Weakness) (sandbox.Backend, error)
}

// Target is one backend configuration a probe runs against.
type Target struct {
	Backend sandbox.Backend
	// Guest is the argv prefix that runs the prober inside this backend's
	// sandboxes, e.g. {"/opt/wovyr/wovyr-guest", "probe"}.
	Guest []string
	// Image is the root filesystem template for backends that use one.
	Image string
	// GPUs are the devices the GPU rows (95–97) may assign, the first to
	// the sandbox under test, the others as "another tenant's". Zero: this
	// node's NVML devices, where the rows apply at all.
	GPUs []sandbox.GPUDevice
}

// Observation is one probe run's finding.
type Observation struct {
	Tried    string
	Observed string
	Secure   bool // the exact secure outcome held
}

// Probe is the host-side half of one catalogue row for some backends.
type Probe struct {
	ID       int
	Weakness Weakness // the positive control's configuration
	// ControlOn, if set, is the backend whose weakened copy runs the
	// positive control instead of the target's own. It is for a property
	// no configuration of the target can weaken (gVisor's Sentry keeps its
	// own process table and procfs whatever the OCI spec says): the same
	// probe code must still show, on a backend where the weakness can
	// exist, that it detects it. The record names that backend.
	ControlOn sandbox.Backend
	// ControlImage is the image for ControlOn's sandboxes (zero: the
	// target's).
	ControlImage string
	// Backends lists the backend names this implementation covers.
	Backends []string
	Run      func(ctx context.Context, t Target) Observation
}

// Suite is everything needed to certify one backend.
type Suite struct {
	Target Target
	// Probes implemented for this backend; rows of the catalogue that
	// apply but are not covered here are recorded as failed ("not
	// implemented") unless NotApplicable explains why they do not apply.
	Probes []Probe
	// NotApplicable gives, per row id, why a row naming this backend does
	// not apply to it (e.g. native promises no mount isolation).
	NotApplicable map[int]string
	// Kernel overrides cert.Kernel() (tests).
	Kernel string
	// Prerequisites are what the probes need besides an available backend
	// (the template image they run in). One that is missing means the
	// battery cannot run here: Run returns a *NotRunError and no record,
	// since every probe would "fail" for a reason that says nothing about
	// the backend's isolation.
	Prerequisites []Prerequisite
	// Teardown, if set, releases what the probes shared (a neighbour VM
	// they all had to leave answering); Run calls it before it returns.
	Teardown func()
}

// Prerequisite is one thing the battery needs. Check returns nil when it is
// there, else an error that names what is missing and how to get it.
type Prerequisite struct {
	What  string // e.g. "template busybox"
	Check func() error
}

// NotRunError says the battery did not run for Backend: a prerequisite is
// missing (or the backend is unavailable). It is no verdict on the
// backend's isolation, and nothing is recorded.
type NotRunError struct {
	Backend string
	Reason  string
}

func (e *NotRunError) Error() string {
	return fmt.Sprintf("battery not run for %s: %s", e.Backend, e.Reason)
}

// Run runs the suite and returns the certification record. Progress lines
// go to progress (nil for none).
func Run(ctx context.Context, s Suite, progress io.Writer) (cert.Record, error) {
	if s.Teardown != nil {
		defer s.Teardown()
	}
	b := s.Target.Backend
	capa := b.Probe(ctx)
	if !capa.Available {
		return cert.Record{}, &NotRunError{Backend: b.Name(), Reason: "unavailable: " + capa.Reason}
	}
	for _, p := range s.Prerequisites {
		if err := p.Check(); err != nil {
			return cert.Record{}, &NotRunError{Backend: b.Name(), Reason: err.Error()}
		}
	}
	w, ok := b.(Weakener)
	if !ok {
		return cert.Record{}, fmt.Errorf("battery: %s offers no weakened configurations, so no probe can have a positive control", b.Name())
	}
	kernel := s.Kernel
	if kernel == "" {
		kernel = cert.Kernel()
	}
	rec := cert.Record{Key: cert.Key{Backend: b.Name(), RuntimeVersion: capa.Version, Kernel: kernel, ConfigHash: capa.ConfigHash}, Accel: capa.Accel, Egress: capa.Egress, Unprivileged: capa.Unprivileged}
	impl := map[int]Probe{}
	for _, p := range s.Probes {
		impl[p.ID] = p
	}
	for _, row := range catalogue {
		if !row.appliesTo(b.Name()) {
			continue
		}
		o := cert.Outcome{ID: row.ID, Name: row.Name, Applies: true}
		if why := gpuNotApplicable(ctx, row.ID, b); why != "" {
			o.Applies, o.Why = false, why
			rec.Outcomes = append(rec.Outcomes, o)
			continue
		}
		if why, na := s.NotApplicable[row.ID]; na {
			o.Applies, o.Why = false, why
			rec.Outcomes = append(rec.Outcomes, o)
			continue
		}
		p, ok := impl[row.ID]
		if !ok && slices.Contains(gpuRows, row.ID) {
			// The backend could give GPUs here but nothing probes their
			// isolation yet: the record says so, and the manager gives it
			// no GPU work (cert.Record.CoversGPUs) rather than failing it
			// for all work.
			o.Applies, o.Why = false, cert.GPUUnprobed
			rec.Outcomes = append(rec.Outcomes, o)
			continue
		}
		if !ok {
			o.Observed = "not implemented for this backend yet"
			rec.Outcomes = append(rec.Outcomes, o)
			report(progress, o)
			continue
		}
		start := time.Now()
		obs := p.Run(ctx, s.Target)
		o.Tried, o.Observed, o.Pass = obs.Tried, obs.Observed, obs.Secure
		cw, label := w, string(p.Weakness)
		if p.ControlOn != nil {
			var ok bool
			if cw, ok = p.ControlOn.(Weakener); !ok {
				cw = nil
			}
			label = p.ControlOn.Name() + "/" + label
		}
		var weak sandbox.Backend
		err := fmt.Errorf("%s offers no weakened configurations", label)
		if cw != nil {
			weak, err = cw.Weakened(p.Weakness)
		}
		if err != nil {
			o.ControlObserved = fmt.Sprintf("no %s configuration: %v", label, err)
		} else {
			wt := s.Target
			wt.Backend = weak
			if p.ControlImage != "" {
				wt.Image = p.ControlImage
			}
			ctl := p.Run(ctx, wt)
			o.ControlObserved = fmt.Sprintf("[%s] %s", label, ctl.Observed)
			o.ControlFlagged = !ctl.Secure
		}
		rec.Outcomes = append(rec.Outcomes, o)
		report(progress, o, time.Since(start))
	}
	rec.Passed = rec.Verdict()
	rec.At = time.Now().UTC()
	return rec, nil
}

func report(w io.Writer, o cert.Outcome, took ...time.Duration) {
	if w == nil {
		return
	}
	verdict := "PASS"
	switch {
	case !o.Pass:
		verdict = "FAIL"
	case !o.ControlFlagged:
		verdict = "FAIL (control did not flag)"
	}
	d := ""
	if len(took) > 0 {
		d = " " + took[0].Round(time.Millisecond).String()
	}
	fmt.Fprintf(w, "#%-3d %-28s %s%s\n", o.ID, o.Name, verdict, d)
}
