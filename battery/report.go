package battery

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/wovyr/wovyr/cert"
)

// WriteMarkdown writes a probe × configuration table of the records'
// outcomes: PASS (probe held and its control flagged), FAIL, n/a (does not
// apply, with the reason in the record), or blank (the row does not name
// that backend). One column per backend and runtime — the newest record of
// each — so a backend certified on several runtimes (container on crun and
// on runc) gets a column per runtime, headed "container (runc)".
func WriteMarkdown(w io.Writer, recs []cert.Record) {
	recs = newestPerRuntime(recs)
	slices.SortStableFunc(recs, func(a, b cert.Record) int {
		return cmp.Or(strings.Compare(order(a.Backend), order(b.Backend)), strings.Compare(RuntimeName(a), RuntimeName(b)), cmpBool(a.Egress, b.Egress), cmpBool(a.Unprivileged, b.Unprivileged))
	})
	fmt.Fprintln(w, "| # | probe |"+headers(recs))
	fmt.Fprintln(w, "|---|---|"+strings.Repeat("---|", len(recs)))
	by := make([]map[int]cert.Outcome, len(recs))
	for i, r := range recs {
		by[i] = map[int]cert.Outcome{}
		for _, o := range r.Outcomes {
			by[i][o.ID] = o
		}
	}
	for _, row := range catalogue {
		fmt.Fprintf(w, "| %d | %s |", row.ID, row.Name)
		for i := range recs {
			o, ok := by[i][row.ID]
			cell := ""
			switch {
			case !ok:
			case !o.Applies:
				cell = "n/a"
			case o.Pass && o.ControlFlagged:
				cell = "PASS"
			case o.Pass:
				cell = "FAIL (control)"
			default:
				cell = "FAIL"
			}
			fmt.Fprintf(w, " %s |", cell)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	for _, r := range recs {
		pass, fail, na := 0, 0, 0
		for _, o := range r.Outcomes {
			switch {
			case !o.Applies:
				na++
			case o.Pass && o.ControlFlagged:
				pass++
			default:
				fail++
			}
		}
		accel := ""
		if r.Accel != "" {
			accel = ", accel " + r.Accel
		}
		fmt.Fprintf(w, "- **%s**%s (%s, kernel %s, config %s%s): %d passed with flagged controls, %d failed, %d not applicable; certified: %v (%s)\n",
			r.Backend, egressNote(r), r.RuntimeVersion, r.Kernel, r.ConfigHash, accel, pass, fail, na, r.Passed, r.At.Format("2006-01-02 15:04 MST"))
	}
	fmt.Fprint(w, cloneSharing)
}

// cloneSharing says what a clone of a golden snapshot shares by design and
// what it never shares (issue 17; rows 85–92).
const cloneSharing = `
## What a clone shares

A clone restored from a golden snapshot (microVM: ADR 0018) starts as an exact copy of a
sandbox that ran only the template's warm-up, so it shares by design everything that
warm-up created: the guest kernel's page cache and slab state, the agent's process and
its descriptors, whatever an interpreter loaded or seeded at import (a template whose
warm-up seeds an in-process PRNG hands every clone the same seed: reseed in the tool, or
draw from the kernel), the golden's scratch filesystem, the hostname (` + "`wovyr`" + ` on every
sandbox of every tier).

It never shares: anything of a tenant (no golden is captured from a sandbox a tenant ran
in, and no clone is ever captured: rows 85, 86), the kernel RNG state (reseeded from 64
host-random bytes before the first job: row 87), the wall clock (set from the host,
within 50 ms: row 88), boot_id and machine-id (fresh per clone: row 87), the network
identity (its own slot, address and MAC: row 89), writable disk blocks (a copy of the
golden's scratch, which only the warm-up wrote: row 92), and RAM writes (private,
copy-on-write over a golden sealed against writes).

A gVisor clone (ADR 0020; opt-in, certified either way) shares the same by design — the
Sentry's memory as the warm-up left it, the agent's process, the template's warm-up state
— with a fresh scratch directory and root overlay of its own. It never shares anything of
a tenant (rows 85, 86, 90), its boot_id and machine-id (fresh files per clone) or its
agent's runtime and PRNG state (the agent re-executes itself before the first job: row
87); its randomness and clock are the host's on every call, and it has no network but
loopback.

A wasm instance of a pre-initialised module (ADR 0019) shares what the module's init left
in memory and globals — including anything init drew from random_get or a clock — and
never anything of a tenant: init runs with no env, args, stdin or directory (rows 85, 86),
and every instance's memory is a fresh copy-on-write image of the artifact.
`

func headers(recs []cert.Record) string {
	runtimes := map[string]map[string]bool{} // backend → its runtimes
	for _, r := range recs {
		if runtimes[r.Backend] == nil {
			runtimes[r.Backend] = map[string]bool{}
		}
		runtimes[r.Backend][RuntimeName(r)] = true
	}
	var b strings.Builder
	for _, r := range recs {
		var notes []string
		if len(runtimes[r.Backend]) > 1 {
			notes = append(notes, RuntimeName(r))
		}
		if r.Egress {
			notes = append(notes, "egress")
		}
		if r.Unprivileged {
			notes = append(notes, "unprivileged")
		}
		if len(notes) > 0 {
			b.WriteString(" " + r.Backend + " (" + strings.Join(notes, ", ") + ") |")
		} else {
			b.WriteString(" " + r.Backend + " |")
		}
	}
	return b.String()
}

// RuntimeName is the runtime a record was made on: the first word of its
// runtime version ("runc" of "runc version 1.1.5+ds1").
func RuntimeName(r cert.Record) string {
	name, _, _ := strings.Cut(r.RuntimeVersion, " ")
	return name
}

// newestPerRuntime keeps the newest record of each backend and runtime,
// with and without allowlisted egress, with and without root.
func newestPerRuntime(recs []cert.Record) []cert.Record {
	type key struct {
		backend, runtime     string
		egress, unprivileged bool
	}
	newest := map[key]int{}
	var keys []key
	for i, r := range recs {
		k := key{r.Backend, RuntimeName(r), r.Egress, r.Unprivileged}
		j, ok := newest[k]
		if !ok {
			keys = append(keys, k)
		}
		if !ok || r.At.After(recs[j].At) {
			newest[k] = i
		}
	}
	out := make([]cert.Record, 0, len(keys))
	for _, k := range keys {
		out = append(out, recs[newest[k]])
	}
	return out
}

// order sorts backends by strength, unknown names last.
func order(name string) string {
	i := strings.Index("NWCGM", letters[name])
	if i < 0 {
		return "9" + name
	}
	return fmt.Sprint(i) + name
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func egressNote(r cert.Record) string {
	note := ""
	if r.Egress {
		note = " with allowlisted egress"
	}
	if r.Unprivileged {
		note += " without root"
	}
	return note
}
