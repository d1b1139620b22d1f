package main

import (
	"context"
	"flag"
	"os"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
)

// copyTree is cp -r: a directory's tree either way, as one tar stream
// through the session's archive routes. The local side is read and
// written by the agent's own archive code through an os.Root, with the
// confinement a session's workspace gets: an archive the session made
// cannot write outside LOCAL, and one it would refuse is refused whole
// before anything is written.
func (sc *sessionCtx) copyTree(ctx context.Context, cl *client.Client, src, dst string, fs *flag.FlagSet) int {
	if id, p, ok := splitRemote(src); ok {
		if _, _, remote := splitRemote(dst); remote || dst == "-" {
			fs.Usage()
			return exitUsage
		}
		data, err := cl.DownloadArchive(ctx, id, p)
		if err != nil {
			return sc.fail(err)
		}
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return sc.fail(sandbox.Wrap(sandbox.BadInput, err, "cp -r"))
		}
		root, err := os.OpenRoot(dst)
		if err != nil {
			return sc.fail(sandbox.Wrap(sandbox.BadInput, err, "cp -r"))
		}
		defer root.Close()
		if err := agent.ExtractInto(root, ".", data); err != nil {
			return sc.fail(sandbox.Wrap(sandbox.BadInput, err, "extract %s into %s", src, dst))
		}
		return 0
	}
	id, p, ok := splitRemote(dst)
	if !ok || src == "-" {
		fs.Usage()
		return exitUsage
	}
	root, err := os.OpenRoot(src)
	if err != nil {
		return sc.fail(sandbox.Wrap(sandbox.BadInput, err, "cp -r"))
	}
	defer root.Close()
	data, err := agent.ArchiveDir(root, ".", sandbox.MaxFileBytes)
	if err != nil {
		return sc.fail(sandbox.Wrap(sandbox.BadInput, err, "archive %s", src))
	}
	if err := cl.UploadArchive(ctx, id, p, data); err != nil {
		return sc.fail(err)
	}
	return 0
}
