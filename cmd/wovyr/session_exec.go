package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
)

// sessionExecCmd is `wovyr session exec`.
type sessionExecCmd struct {
	env     multiFlag
	dir     string
	wall    time.Duration
	jsonOut bool
	bg      bool
	stdin   bool
}

func sessionExecMain(ctx context.Context, sc *sessionCtx, args []string) int {
	c := &sessionExecCmd{}
	fs := sc.flags("exec", "exec [flags] ID -- ARGV...\n\nStdin is passed through when it is a pipe or a file. The exit code is the command's,\nas for wovyr run; an unknown or ended session is 120.")
	fs.Var(&c.env, "env", "KEY=VALUE for the command's environment (repeatable; nothing is inherited)")
	fs.StringVar(&c.dir, "dir", "", "working directory, relative to the workspace")
	fs.DurationVar(&c.wall, "wall", 0, "wall-clock limit (default and most: the session's)")
	fs.BoolVar(&c.jsonOut, "json", false, "print the result as JSON")
	fs.BoolVar(&c.bg, "background", false, "start the command in the background and print its exec id (see session ps, session kill)")
	fs.BoolVar(&c.stdin, "open-stdin", false, "with --background: keep its stdin open for session write")
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
	if c.bg {
		return c.background(ctx, sc, cl, argv)
	}
	if c.stdin {
		return sc.fail(sandbox.Errorf(sandbox.BadInput, "open_stdin", "--open-stdin needs --background"))
	}
	stdin, err := readStdin()
	if err != nil {
		return sc.fail(err)
	}
	e := &sandbox.Exec{Argv: argv[1:], Env: c.env, Dir: c.dir, Stdin: stdin, Wall: c.wall}
	if c.jsonOut {
		res, err := cl.Exec(ctx, argv[0], e)
		if err != nil {
			return sc.fail(err)
		}
		return printResult(sc.stdout, sc.stderr, res, true)
	}
	res, err := execLive(ctx, cl, argv[0], e, sc.stdout, sc.stderr)
	if err != nil {
		return sc.fail(err)
	}
	// The output is already out: print only how it ended.
	res.Stdout, res.Stderr = nil, nil
	return printResult(sc.stdout, sc.stderr, res, false)
}

// background starts argv[1:] in session argv[0] as a background exec and
// prints its exec id (its record with --json). Stdin is not read: a
// background exec's is empty, or with --open-stdin what session write
// sends it.
func (c *sessionExecCmd) background(ctx context.Context, sc *sessionCtx, cl *client.Client, argv []string) int {
	ex, err := cl.StartBackground(ctx, argv[0], &sandbox.Exec{Argv: argv[1:], Env: c.env, Dir: c.dir, Wall: c.wall, OpenStdin: c.stdin})
	if err != nil {
		return sc.fail(err)
	}
	if c.jsonOut {
		printJSONTo(sc.stdout, ex)
		return 0
	}
	fmt.Fprintln(sc.stdout, ex.ID)
	return 0
}

// execLive starts e in session id and copies its output to stdout and
// stderr as the command produces it, then returns its result (a failed
// exec as its typed error). A stream cut short is resumed from the last
// event it delivered.
func execLive(ctx context.Context, cl *client.Client, id string, e *sandbox.Exec, stdout, stderr io.Writer) (*sandbox.Result, error) {
	ex, err := cl.StartExec(ctx, id, e)
	if err != nil {
		return nil, err
	}
	var final *client.Exec
	last := 0
	for tries := 0; final == nil; tries++ {
		err := cl.ExecEvents(ctx, id, ex.ID, last, func(ev client.Event) error {
			last = ev.Seq
			switch ev.Type {
			case client.EventStdout:
				stdout.Write(ev.Data)
			case client.EventStderr:
				stderr.Write(ev.Data)
			case client.EventExit:
				final = ev.Exec
			}
			return nil
		})
		if err != nil && (ctx.Err() != nil || tries >= 3 || !errors.Is(err, io.ErrUnexpectedEOF)) {
			return nil, err
		}
	}
	if final.Result == nil {
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "exec %s ended (%s) without a result", ex.ID, final.State)
	}
	if final.State != client.ExecDone {
		return nil, &client.Error{Code: final.Result.Class, Message: final.Result.Error}
	}
	return final.Result, nil
}
