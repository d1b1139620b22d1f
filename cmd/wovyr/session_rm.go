package main

import (
	"context"
)

func sessionRmMain(ctx context.Context, sc *sessionCtx, args []string) int {
	fs := sc.flags("rm", "rm [flags] ID | ID:PATH\n\nID ends the session (its sandbox is destroyed); ID:PATH removes PATH (a directory\nwith its contents) from its workspace.")
	cl, code := sc.start(fs, args, func(n int) bool { return n == 1 })
	if cl == nil {
		return code
	}
	if id, p, ok := splitRemote(fs.Arg(0)); ok {
		if err := cl.RemoveFile(ctx, id, p); err != nil {
			return sc.fail(err)
		}
		return 0
	}
	if _, err := cl.DeleteSession(ctx, fs.Arg(0)); err != nil {
		return sc.fail(err)
	}
	return 0
}
