package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"
)

// backendsCmd is `wovyr backends`.
func backendsMain(ctx context.Context, g *globals, args []string) int {
	fs := flag.NewFlagSet("backends", flag.ContinueOnError)
	jsonOut := fs.Bool("json", false, "print JSON")
	probe := fs.Bool("probe", false, "probe every backend now instead of showing stored answers (each probe starts a real sandbox: seconds for a VM)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	n, code := mustNode(g)
	if n == nil {
		return code
	}
	defer n.Close()
	sts := n.mgr.Detect(ctx, *probe)
	if *jsonOut {
		printJSON(sts)
		return 0
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	now := time.Now()
	fmt.Fprintln(tw, "BACKEND\tSTRENGTH\tAVAILABLE\tCERTIFIED\tPROBED\tVERSION\tDETAIL")
	for _, st := range sts {
		avail, certified, detail := "yes", "yes", ""
		if !st.Capability.Available {
			avail, detail = "no", st.Capability.Reason
		}
		if !st.Certified {
			certified = "no"
			if detail == "" {
				detail = st.CertReason
			}
		}
		if st.Capability.Accel != "" {
			detail = "accel=" + st.Capability.Accel + " " + detail
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", st.Name, st.Strength, avail, certified, probeAge(now, st.ProbedAt, st.Cached), st.Capability.Version, detail)
	}
	tw.Flush()
	return 0
}

// probeAge says how long ago a probe ran: "now" for one this command ran,
// else its age, rounded for reading ("3m ago").
func probeAge(now, at time.Time, cached bool) string {
	if !cached {
		return "now"
	}
	d := now.Sub(at)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	default:
		return fmt.Sprintf("%dh%02dm ago", int(d.Hours()), int(d.Minutes())%60)
	}
}
