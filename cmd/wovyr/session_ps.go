package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/wovyr/wovyr/client"
)

func sessionPsMain(ctx context.Context, sc *sessionCtx, args []string) int {
	fs := sc.flags("ps", "ps [flags] ID [EID]\n\nWithout EID: the session's background processes. With EID: that one's output so far\n(its stdout to stdout, its stderr to stderr).")
	jsonOut := fs.Bool("json", false, "print JSON")
	cl, code := sc.start(fs, args, func(n int) bool { return n == 1 || n == 2 })
	if cl == nil {
		return code
	}
	if fs.NArg() == 2 {
		ex, err := cl.Process(ctx, fs.Arg(0), fs.Arg(1))
		if err != nil {
			return sc.fail(err)
		}
		if *jsonOut {
			printJSONTo(sc.stdout, ex)
		} else if ex.Result != nil {
			sc.stdout.Write(ex.Result.Stdout)
			sc.stderr.Write(ex.Result.Stderr)
		}
		return 0
	}
	ps, err := cl.Processes(ctx, fs.Arg(0))
	if err != nil {
		return sc.fail(err)
	}
	if *jsonOut {
		printJSONTo(sc.stdout, ps)
		return 0
	}
	tw := tabwriter.NewWriter(sc.stdout, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintln(tw, "EID\tPID\tSTATE\tEXIT\tSTARTED\tCOMMAND")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", p.ID, p.Pid, p.State, exitText(p), p.Started.Local().Format(time.DateTime), strings.Join(p.Argv, " "))
	}
	return 0
}

// exitText is how a background exec ended: its exit code (and signal), or
// "-" while it runs.
func exitText(p client.Exec) string {
	switch {
	case p.Result == nil || p.State == client.ExecRunning:
		return "-"
	case p.Result.Signal != "":
		return fmt.Sprintf("%d (%s)", p.Result.ExitCode, p.Result.Signal)
	}
	return fmt.Sprint(p.Result.ExitCode)
}
