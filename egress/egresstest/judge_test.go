package egresstest

import (
	"strings"
	"testing"
)

// asWanted is a run in which every check came out as the table says.
func asWanted() Run {
	rows := SandboxTable("10.213.0.1", "10.213.0.5")
	r := Run{Rows: rows, Queries: []string{"allowed.test."}}
	for _, rw := range rows {
		r.Rep.Outcomes = append(r.Rep.Outcomes, Outcome{ID: rw.C.ID, OK: rw.Want})
	}
	child := &Report{}
	for _, rw := range ChildRows(rows) {
		child.Outcomes = append(child.Outcomes, Outcome{ID: rw.C.ID, OK: rw.Want})
	}
	r.Rep.Child = child
	return r
}

func set(rep *Report, id string, ok bool) {
	for i := range rep.Outcomes {
		if rep.Outcomes[i].ID == id {
			rep.Outcomes[i].OK = ok
			return
		}
	}
	panic("no check " + id)
}

var rows = []int{70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 83, 84}

func TestJudge(t *testing.T) {
	for _, id := range rows {
		if v := Judge(id, asWanted()); !v.Secure() || len(v.Checks) == 0 {
			t.Errorf("row %d on a clean run: %s", id, v)
		}
	}
	if v := Judge(82, asWanted()); v.Secure() || !strings.Contains(v.String(), "no check") {
		t.Errorf("row 82 has no checks, judged %v: %s", v.Secure(), v)
	}

	r := asWanted()
	set(&r.Rep, "79-sni-denied", true) // a denial that let through: row 79 only
	for _, id := range rows {
		if v := Judge(id, r); v.Secure() != (id != 79) {
			t.Errorf("row %d with 79-sni-denied let through: secure=%v %s", id, v.Secure(), v)
		}
	}
	if v := Judge(79, r); len(v.Wrong) != 1 || !strings.HasPrefix(v.Wrong[0], "79-sni-denied ok=true") {
		t.Errorf("row 79 names %v", v.Wrong)
	}

	r = asWanted()
	set(&r.Rep, "70-tcp-port-denied", true) // a raw connect: rows 70 and 78
	for _, id := range rows {
		if v := Judge(id, r); v.Secure() != (id != 70 && id != 78) {
			t.Errorf("row %d with a raw denied connect let through: secure=%v", id, v.Secure())
		}
	}

	r = asWanted()
	set(&r.Rep, "proxy-allowed", false) // an allowed check failed: no row can pass
	for _, id := range rows {
		if v := Judge(id, r); v.Secure() {
			t.Errorf("row %d passed although proxy-allowed failed", id)
		}
	}

	r = asWanted()
	r.Queries = append(r.Queries, Canary+".exfil.test.")
	for _, id := range rows {
		if v := Judge(id, r); v.Secure() != (id != 76 && id != 77) {
			t.Errorf("row %d with the canary seen: secure=%v", id, v.Secure())
		}
	}

	r = asWanted()
	set(r.Rep.Child, "79-sni-denied", true)
	if v := Judge(84, r); v.Secure() {
		t.Error("row 84 passed although the child got through")
	}
	r.Rep.Child, r.Rep.ChildErr = nil, "exec: no such file"
	if v := Judge(84, r); v.Secure() || !strings.Contains(v.String(), "exec: no such file") {
		t.Errorf("row 84 without a child report: %s", v)
	}

	r = asWanted()
	r.Rep.Outcomes = r.Rep.Outcomes[:3]
	if v := Judge(71, r); v.Secure() {
		t.Error("a truncated report passed")
	}
}
