package main

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
)

// writeChunk is how much of its stdin session write sends at once.
const writeChunk = 64 << 10

func sessionWriteMain(ctx context.Context, sc *sessionCtx, args []string) int {
	fs := sc.flags("write", "write [flags] ID EID\n\nCopies this command's stdin, as it comes, to the stdin of background process EID of\nsession ID (started with exec --background --open-stdin), then closes it, unless\n--keep-open. What the process's pipe cannot take yet is sent again.")
	keep := fs.Bool("keep-open", false, "leave its stdin open at the end of this command's")
	cl, code := sc.start(fs, args, func(n int) bool { return n == 2 })
	if cl == nil {
		return code
	}
	if err := streamStdin(ctx, cl, fs.Arg(0), fs.Arg(1), sc.stdin(), !*keep); err != nil {
		return sc.fail(err)
	}
	return 0
}

// streamStdin sends r to eid's stdin in chunks, each resent in part until
// the process's pipe has taken it all, waiting a little longer after each
// write that took nothing; with end, the last write closes it.
func streamStdin(ctx context.Context, cl *client.Client, id, eid string, r io.Reader, end bool) error {
	buf := make([]byte, writeChunk)
	for {
		n, rerr := io.ReadFull(r, buf)
		last := rerr != nil
		if rerr != nil && !errors.Is(rerr, io.EOF) && !errors.Is(rerr, io.ErrUnexpectedEOF) {
			return sandbox.Wrap(sandbox.BadInput, rerr, "read stdin")
		}
		chunk, wait := buf[:n], time.Millisecond
		for len(chunk) > 0 || last && end {
			w, err := cl.WriteStdin(ctx, id, eid, chunk, last && end)
			if err != nil {
				return err
			}
			chunk = chunk[w.Written:]
			if w.Closed || len(chunk) == 0 && !last {
				break
			}
			if w.Written > 0 {
				wait = time.Millisecond
				continue
			}
			select {
			case <-ctx.Done():
				return sandbox.Wrap(sandbox.Killed, ctx.Err(), "write stdin")
			case <-time.After(wait):
			}
			wait = min(2*wait, 200*time.Millisecond)
		}
		if last {
			return nil
		}
	}
}
