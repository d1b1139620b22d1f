package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
)

// backendsCmd is `wovyr backends`.
func backendsMain(ctx context.Context, g *globals, args []string) int {
	fs := flag.NewFlagSet("backends", flag.ContinueOnError)
	jsonOut := fs.Bool("json", false, "print JSON")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	n, code := mustNode(g)
	if n == nil {
		return code
	}
	defer n.Close()
	sts := n.mgr.Detect(ctx, true)
	if *jsonOut {
		printJSON(sts)
		return 0
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BACKEND\tSTRENGTH\tAVAILABLE\tCERTIFIED\tVERSION\tDETAIL")
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
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", st.Name, st.Strength, avail, certified, st.Capability.Version, detail)
	}
	tw.Flush()
	return 0
}
