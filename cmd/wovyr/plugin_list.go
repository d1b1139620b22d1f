package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
)

func pluginListMain(ctx context.Context, sc *sessionCtx, args []string) int {
	fs := sc.flags("list", "list [flags]\n\nThe installed plugins: name, trust, granted capabilities, and each function's WIT\nsignature.")
	jsonOut := fs.Bool("json", false, "print JSON")
	cl, _, code := sc.startAnywhere(fs, args, func(n int) bool { return n == 0 })
	if cl == nil {
		return code
	}
	ps, err := cl.Plugins(ctx)
	if err != nil {
		return sc.fail(err)
	}
	if *jsonOut {
		printJSONTo(sc.stdout, ps)
		return 0
	}
	tw := tabwriter.NewWriter(sc.stdout, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintln(tw, "NAME\tTRUST\tCAPABILITIES\tFUNCTION\tSIGNATURE")
	for _, p := range ps {
		caps := strings.Join(p.Capabilities, ",")
		if caps == "" {
			caps = "-"
		}
		for i, f := range p.Functions {
			if i == 0 {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Name, p.Trust, caps, f.Name, f.Signature)
			} else {
				fmt.Fprintf(tw, "\t\t\t%s\t%s\n", f.Name, f.Signature)
			}
		}
	}
	return 0
}
