package battery

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/wovyr/wovyr/cert"
)

// WriteMarkdown writes a probe × backend table of the records' outcomes:
// PASS (probe held and its control flagged), FAIL, n/a (does not apply,
// with the reason in the record), or blank (the row does not name that
// backend).
func WriteMarkdown(w io.Writer, recs []cert.Record) {
	slices.SortFunc(recs, func(a, b cert.Record) int { return strings.Compare(order(a.Backend), order(b.Backend)) })
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
		fmt.Fprintf(w, "- **%s** (%s, kernel %s, config %s%s): %d passed with flagged controls, %d failed, %d not applicable; certified: %v (%s)\n",
			r.Backend, r.RuntimeVersion, r.Kernel, r.ConfigHash, accel, pass, fail, na, r.Passed, r.At.Format("2006-01-02 15:04 MST"))
	}
}

func headers(recs []cert.Record) string {
	var b strings.Builder
	for _, r := range recs {
		b.WriteString(" " + r.Backend + " |")
	}
	return b.String()
}

// order sorts backends by strength, unknown names last.
func order(name string) string {
	i := strings.Index("NWCGM", letters[name])
	if i < 0 {
		return "9" + name
	}
	return fmt.Sprint(i) + name
}
