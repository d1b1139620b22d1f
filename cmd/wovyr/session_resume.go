package main

import (
	"context"
	"fmt"
)

func sessionResumeMain(ctx context.Context, sc *sessionCtx, args []string) int {
	fs := sc.flags("resume", "resume [flags] ID\n\nResume a paused session now, on the backend it was created on.")
	cl, code := sc.start(fs, args, func(n int) bool { return n == 1 })
	if cl == nil {
		return code
	}
	s, err := cl.ResumeSession(ctx, fs.Arg(0))
	if err != nil {
		return sc.fail(err)
	}
	fmt.Fprintf(sc.stdout, "%s %s\n", s.ID, s.State)
	return 0
}
