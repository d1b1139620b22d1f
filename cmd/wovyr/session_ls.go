package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/wovyr/wovyr/client"
)

func sessionLsMain(ctx context.Context, sc *sessionCtx, args []string) int {
	fs := sc.flags("ls", "ls [flags] [ID[:DIR]]\n\nWithout an argument: the tenant's sessions. With one: a directory of a session's workspace.")
	jsonOut := fs.Bool("json", false, "print JSON")
	cl, code := sc.start(fs, args, func(n int) bool { return n <= 1 })
	if cl == nil {
		return code
	}
	tw := tabwriter.NewWriter(sc.stdout, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	if fs.NArg() == 0 {
		ss, err := cl.Sessions(ctx)
		if err != nil {
			return sc.fail(err)
		}
		if *jsonOut {
			printJSONTo(sc.stdout, ss)
			return 0
		}
		fmt.Fprintln(tw, "ID\tBACKEND\tSTATE\tEXECS\tCREATED\tDETAIL")
		for _, s := range ss {
			detail := s.EndReason
			if s.State == client.SessionPaused {
				detail = fmt.Sprintf("resume: %s, %d bytes kept", s.Resume, s.PausedBytes)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", s.ID, s.Backend, s.State, s.Execs, s.Created.Local().Format(time.DateTime), detail)
		}
		return 0
	}
	id, dir, ok := splitRemote(fs.Arg(0))
	if !ok {
		id = fs.Arg(0)
	}
	ents, err := cl.ListFiles(ctx, id, dir)
	if err != nil {
		return sc.fail(err)
	}
	if *jsonOut {
		printJSONTo(sc.stdout, ents)
		return 0
	}
	for _, e := range ents {
		fmt.Fprintf(tw, "%s\t%04o\t%d\t%s\t%s\n", e.Type, e.Mode, e.Size, e.ModTime.Local().Format(time.DateTime), e.Path)
	}
	return 0
}
