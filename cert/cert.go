// Package cert holds certification records: the proof, per node, that a
// backend passed the escape battery. The manager refuses any backend without
// a record that is valid for exactly what runs now — the same runtime
// version, kernel and isolation-relevant configuration — so an upgrade of any
// of them voids the certification until the battery passes again.
package cert

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Key identifies what was certified.
type Key struct {
	Backend        string `json:"backend"`
	RuntimeVersion string `json:"runtime_version"`
	Kernel         string `json:"kernel"`
	ConfigHash     string `json:"config_hash"`
}

// Outcome is one probe's result in a record.
type Outcome struct {
	ID       int    `json:"id"`   // BATTERY.md row number
	Name     string `json:"name"` // short probe name
	Applies  bool   `json:"applies"`
	Why      string `json:"why,omitempty"` // why it does not apply
	Tried    string `json:"tried,omitempty"`
	Observed string `json:"observed,omitempty"`
	Pass     bool   `json:"pass"`
	// Control is the positive control: the same probe against a weakened
	// configuration. ControlFlagged must be true, or the probe proves nothing.
	ControlObserved string `json:"control_observed,omitempty"`
	ControlFlagged  bool   `json:"control_flagged"`
}

// Record is a certification: the key, every probe outcome, and the verdict.
type Record struct {
	Key
	Accel string `json:"accel,omitempty"`
	// Egress says the configuration enforces allowlisted egress (its
	// backend has an egress service), so the egress rows ran for real.
	Egress bool `json:"egress,omitempty"`
	// Unprivileged says the configuration ran without root (the wasm
	// backend without workspaces); rows it cannot offer are not
	// applicable, each with why.
	Unprivileged bool      `json:"unprivileged,omitempty"`
	Passed       bool      `json:"passed"`
	Outcomes     []Outcome `json:"outcomes"`
	At           time.Time `json:"at"`
}

// Failed lists the probes that failed or whose control did not flag.
func (r Record) Failed() []string {
	var f []string
	for _, o := range r.Outcomes {
		if !o.Applies {
			continue
		}
		if !o.Pass {
			f = append(f, fmt.Sprintf("#%d %s", o.ID, o.Name))
		} else if !o.ControlFlagged {
			f = append(f, fmt.Sprintf("#%d %s (positive control did not flag)", o.ID, o.Name))
		}
	}
	return f
}

// GPUUnprobed is why a GPU row is recorded not applicable where the node
// has a GPU and the backend could give it, but nothing probes the row for
// that backend yet (package battery). A record carrying it certifies the
// backend, but not for GPU work (CoversGPUs).
const GPUUnprobed = "no probe of this GPU row for this backend yet: its certification does not cover GPUs, so it is given no GPU work"

// CoversGPUs reports whether r leaves no GPU row unprobed. Where the node
// has no GPU the rows are not applicable for that reason instead, and GPU
// work can come only from an inventory the operator named as fake.
func (r Record) CoversGPUs() bool {
	for _, o := range r.Outcomes {
		if !o.Applies && o.Why == GPUUnprobed {
			return false
		}
	}
	return true
}

// Verdict recomputes Passed from the outcomes: every applicable probe passed
// and every positive control flagged its weakness.
func (r Record) Verdict() bool { return len(r.Outcomes) > 0 && len(r.Failed()) == 0 }

// Check says whether r certifies k, and if not, why not.
func (r Record) Check(k Key) error {
	switch {
	case r.Backend != k.Backend:
		return fmt.Errorf("record is for backend %q", r.Backend)
	case r.RuntimeVersion != k.RuntimeVersion:
		return fmt.Errorf("certified for runtime %q, now %q: run wovyr certify --backend %s", r.RuntimeVersion, k.RuntimeVersion, k.Backend)
	case r.Kernel != k.Kernel:
		return fmt.Errorf("certified on kernel %q, now %q: run wovyr certify --backend %s", r.Kernel, k.Kernel, k.Backend)
	case r.ConfigHash != k.ConfigHash:
		return fmt.Errorf("certified with config %s, now %s: run wovyr certify --backend %s", r.ConfigHash, k.ConfigHash, k.Backend)
	case !r.Passed || !r.Verdict():
		return fmt.Errorf("certification failed: %s", strings.Join(r.Failed(), ", "))
	}
	return nil
}

// Kernel returns this node's kernel release, part of every Key.
func Kernel() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// String is the key's canonical form, used to store records.
func (k Key) String() string {
	return k.Backend + "|" + k.RuntimeVersion + "|" + k.Kernel + "|" + k.ConfigHash
}

// ErrNotCertified is returned when no record matches a key.
var ErrNotCertified = errors.New("not certified")

// Find returns the record certifying exactly k. A node may hold records for
// several configurations of one backend (a daemon with egress, a one-shot
// CLI without); when none matches, the error says how the newest record of
// that backend differs, or that there is none.
func Find(recs []Record, k Key) (Record, error) {
	var newest *Record
	for i, r := range recs {
		if r.Key == k {
			return r, nil
		}
		if r.Backend == k.Backend && (newest == nil || r.At.After(newest.At)) {
			newest = &recs[i]
		}
	}
	if newest == nil {
		return Record{}, fmt.Errorf("%w (run wovyr certify --backend %s)", ErrNotCertified, k.Backend)
	}
	return Record{}, fmt.Errorf("%w: %w", ErrNotCertified, newest.Check(k))
}

// Set is an in-memory snapshot of records; it satisfies manager.Certs for
// one-shot commands that should not hold the store open.
type Set []Record

// Cert returns the record certifying exactly k.
func (s Set) Cert(k Key) (Record, error) { return Find(s, k) }
