package main

import (
	"context"
	"fmt"
)

func sessionPauseMain(ctx context.Context, sc *sessionCtx, args []string) int {
	fs := sc.flags("pause", "pause [flags] ID\n\nPause the session now, its sandbox given back: saved whole where its backend can\n(resume: snapshot, gVisor: files and processes kept), else its workspace kept\n(resume: restart: processes do not survive). The next exec, cp or ls of it (or\nwovyr session resume) resumes it.")
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
