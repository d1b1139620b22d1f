package main

import (
	"context"
)

func pluginRmMain(ctx context.Context, sc *sessionCtx, args []string) int {
	fs := sc.flags("rm", "rm [flags] NAME\n\nUninstalls plugin NAME (its calls in flight finish). Needs an admin token.")
	cl, pos, code := sc.startAnywhere(fs, args, func(n int) bool { return n == 1 })
	if cl == nil {
		return code
	}
	if _, err := cl.RemovePlugin(ctx, pos[0]); err != nil {
		return sc.fail(err)
	}
	return 0
}
