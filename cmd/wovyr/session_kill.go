package main

import (
	"context"
	"fmt"
)

func sessionKillMain(ctx context.Context, sc *sessionCtx, args []string) int {
	fs := sc.flags("kill", "kill [flags] ID EID\n\nKills the background process EID of session ID, with every process of its own session\ninside the sandbox, and prints how it ended.")
	jsonOut := fs.Bool("json", false, "print its final record as JSON")
	cl, code := sc.start(fs, args, func(n int) bool { return n == 2 })
	if cl == nil {
		return code
	}
	ex, err := cl.KillProcess(ctx, fs.Arg(0), fs.Arg(1))
	if err != nil {
		return sc.fail(err)
	}
	if *jsonOut {
		printJSONTo(sc.stdout, ex)
		return 0
	}
	fmt.Fprintf(sc.stdout, "%s %s %s\n", ex.ID, ex.State, exitText(*ex))
	return 0
}
