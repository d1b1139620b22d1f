package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
)

// backendsCmd is `wovyr backends`.
func backendsMain(ctx context.Context, g *globals, args []string) int {
	fs := flag.NewFlagSet("backends", flag.ContinueOnError)
	jsonOut := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	n, err := openNode(g)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wovyr:", err)
		return exitBackendFailure
	}
	sts := n.mgr.Detect(ctx, true)
	if *jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(sts)
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
