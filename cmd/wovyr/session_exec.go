package main

import (
	"context"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// sessionExecCmd is `wovyr session exec`.
type sessionExecCmd struct {
	env     multiFlag
	dir     string
	wall    time.Duration
	jsonOut bool
}

func sessionExecMain(ctx context.Context, sc *sessionCtx, args []string) int {
	c := &sessionExecCmd{}
	fs := sc.flags("exec", "exec [flags] ID -- ARGV...\n\nStdin is passed through when it is a pipe or a file. The exit code is the command's,\nas for wovyr run; an unknown or ended session is 120.")
	fs.Var(&c.env, "env", "KEY=VALUE for the command's environment (repeatable; nothing is inherited)")
	fs.StringVar(&c.dir, "dir", "", "working directory, relative to the workspace")
	fs.DurationVar(&c.wall, "wall", 0, "wall-clock limit (default and most: the session's)")
	fs.BoolVar(&c.jsonOut, "json", false, "print the result as JSON")
	cl, code := sc.start(fs, args, func(n int) bool { return n >= 2 })
	if cl == nil {
		return code
	}
	argv := fs.Args()
	if argv[1] == "--" { // flag stops at ID, before the "--"
		argv = append(argv[:1:1], argv[2:]...)
	}
	if len(argv) < 2 {
		fs.Usage()
		return exitUsage
	}
	stdin, err := readStdin()
	if err != nil {
		return sc.fail(err)
	}
	res, err := cl.Exec(ctx, argv[0], &sandbox.Exec{Argv: argv[1:], Env: c.env, Dir: c.dir, Stdin: stdin, Wall: c.wall})
	if err != nil {
		return sc.fail(err)
	}
	return printResult(sc.stdout, sc.stderr, res, c.jsonOut)
}
