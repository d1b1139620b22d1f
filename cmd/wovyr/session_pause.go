package main

import (
	"context"
	"fmt"
)

func sessionPauseMain(ctx context.Context, sc *sessionCtx, args []string) int {
	fs := sc.flags("pause", "pause [flags] ID\n\nPause the session now: its workspace is kept, its sandbox given back. The next exec,\ncp or ls of it (or wovyr session resume) resumes it with its files; processes do not\nsurvive (resume: restart).")
	cl, code := sc.start(fs, args, func(n int) bool { return n == 1 })
	if cl == nil {
		return code
	}
	s, err := cl.PauseSession(ctx, fs.Arg(0))
	if err != nil {
		return sc.fail(err)
	}
	fmt.Fprintf(sc.stdout, "%s %s (resume: %s, %d bytes kept)\n", s.ID, s.State, s.Resume, s.PausedBytes)
	return 0
}
