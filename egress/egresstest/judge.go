package egresstest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Run is one run of a truth table inside a sandbox: what every backend's
// battery judges its egress rows (BATTERY 70–84) from.
type Run struct {
	Rows    []Row
	Rep     Report
	Queries []string // every name the rig's DNS server was asked
}

// RowOf maps a check to its battery row: the number its ID starts with;
// the un-numbered checks (names, the allowed flows) are row 70.
func RowOf(c Check) int {
	if n, _, ok := strings.Cut(c.ID, "-"); ok {
		if id, err := strconv.Atoi(n); err == nil {
			return id
		}
	}
	return 70
}

// Verdict is one battery row judged from a Run.
type Verdict struct {
	Checks []string // the row's checks
	Wrong  []string // the row's checks that came out wrong (first: they show the row itself broke)
	Failed []string // checks elsewhere in the table that must succeed and did not
}

// Secure reports whether the row held: it has checks, all came out as the
// table says, and so did every check that must succeed (a run that reached
// nothing cannot pass).
func (v Verdict) Secure() bool { return len(v.Checks) > 0 && len(v.Wrong)+len(v.Failed) == 0 }

// String is the verdict as a battery observation.
func (v Verdict) String() string {
	switch {
	case len(v.Checks) == 0 && len(v.Wrong) == 0:
		return "no check of the truth table covers this row"
	case v.Secure():
		return fmt.Sprintf("all %d checks as the allowlist says", len(v.Checks))
	}
	return fmt.Sprintf("%d of the row's checks wrong: %s; %d allowed checks failed: %s",
		len(v.Wrong), strings.Join(v.Wrong, "; "), len(v.Failed), strings.Join(v.Failed, "; "))
}

// Judge judges battery row id from r. A row's checks are those RowOf
// gives it, and for 78 (raw connects that ignore the proxy) also every raw
// TCP connect the table denies; 84's are the re-executed child's whole
// table. 76 and 77 also need the rig's DNS server never to have seen the
// canary.
func Judge(id int, r Run) Verdict {
	var v Verdict
	if len(r.Rep.Outcomes) != len(r.Rows) {
		v.Wrong = append(v.Wrong, fmt.Sprintf("%d outcomes for %d checks", len(r.Rep.Outcomes), len(r.Rows)))
		return v
	}
	in := func(rw Row) bool {
		return RowOf(rw.C) == id || (id == 78 && rw.C.Kind == "tcp" && !rw.Want)
	}
	for i, rw := range r.Rows {
		o := r.Rep.Outcomes[i]
		if id != 84 && in(rw) {
			v.Checks = append(v.Checks, rw.C.ID)
		}
		if o.ID == rw.C.ID && o.OK == rw.Want {
			continue
		}
		d := fmt.Sprintf("%s ok=%v want %v (%.100s)", rw.C.ID, o.OK, rw.Want, strings.TrimSpace(o.Detail))
		switch {
		case id != 84 && in(rw):
			v.Wrong = append(v.Wrong, d)
		case rw.Want:
			v.Failed = append(v.Failed, d)
		}
	}
	switch id {
	case 76, 77:
		if i := slices.IndexFunc(r.Queries, func(q string) bool { return strings.Contains(q, Canary) }); i >= 0 {
			v.Wrong = append(v.Wrong, "the rig's DNS server saw the canary: "+r.Queries[i])
		}
	case 84:
		crows := ChildRows(r.Rows)
		for _, rw := range crows {
			v.Checks = append(v.Checks, "child:"+rw.C.ID)
		}
		c := r.Rep.Child
		if c == nil || len(c.Outcomes) != len(crows) {
			v.Wrong = append(v.Wrong, "no full report from the re-executed child: "+r.Rep.ChildErr)
			break
		}
		for i, rw := range crows {
			if o := c.Outcomes[i]; o.ID != rw.C.ID || o.OK != rw.Want {
				v.Wrong = append(v.Wrong, fmt.Sprintf("child %s ok=%v want %v (%.100s)", rw.C.ID, o.OK, rw.Want, strings.TrimSpace(o.Detail)))
			}
		}
	}
	return v
}
