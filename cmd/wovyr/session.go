package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
)

// subcommand is one command of a daemon command group (session, plugin).
type subcommand struct {
	name, summary string
	run           func(ctx context.Context, sc *sessionCtx, args []string) int
}

// sessionCommands are `wovyr session`'s subcommands, one per file.
var sessionCommands = []subcommand{
	{"create", "create a session and print its id", sessionCreateMain},
	{"exec", "run one command in a session, printing and exiting as wovyr run does", sessionExecMain},
	{"cp", "copy a file into (LOCAL ID:PATH) or out of (ID:PATH LOCAL, - for stdout) a session", sessionCpMain},
	{"ls", "list the tenant's sessions, or (ID[:DIR]) a directory of one's workspace", sessionLsMain},
	{"rm", "end a session (ID), or remove a path in its workspace (ID:PATH)", sessionRmMain},
	{"ps", "list a session's background processes (ID), or print one's output so far (ID EID)", sessionPsMain},
	{"kill", "kill a session's background process (ID EID) with every process of its session", sessionKillMain},
	{"write", "stream this command's stdin to a background process's stdin (ID EID), closing it at the end", sessionWriteMain},
	{"pause", "pause a session (ID): saved whole or its workspace kept, its sandbox given back", sessionPauseMain},
	{"resume", "resume a paused session (ID); any exec, cp or ls of it resumes it too", sessionResumeMain},
}

// sessionCtx is what every session subcommand shares: the daemon's
// address and token, and where it reads and writes.
type sessionCtx struct {
	g              *globals
	group          string // the command group for usage lines; zero means "session"
	remote, token  string
	in             io.Reader // nil: os.Stdin
	stdout, stderr io.Writer
}

func (sc *sessionCtx) stdin() io.Reader {
	if sc.in == nil {
		return os.Stdin
	}
	return sc.in
}

// register adds the daemon flags to fs.
func (sc *sessionCtx) register(fs *flag.FlagSet) {
	fs.StringVar(&sc.remote, "remote", os.Getenv("WOVYR_REMOTE"), "the wovyr daemon's URL, e.g. http://127.0.0.1:8080 (default $WOVYR_REMOTE, else the daemon serving the state dir)")
	fs.StringVar(&sc.token, "token", "", "bearer token (default $WOVYR_TOKEN, else the daemon's bootstrap token in the state dir)")
}

// client is the daemon's client: --remote's, else the one that holds the
// state dir (wovyr serve over it), else a usage error.
func (sc *sessionCtx) client() (*client.Client, error) {
	if sc.remote == "" {
		local, ok := localDaemon(sc.g)
		if !ok {
			return nil, sandbox.Errorf(sandbox.BadInput, "remote", "%ss live in a daemon, and none serves the state dir %s: start wovyr serve, or give --remote URL (or $WOVYR_REMOTE)", sc.groupName(), sc.g.stateDir)
		}
		sc.remote = local
	}
	return client.New(sc.remote, daemonToken(sc.g, sc.token), nil), nil
}

// start parses args into fs, checks the number of arguments left with
// nargs, and returns the daemon's client; on nil it also returns the exit
// code (usage, help, no daemon).
func (sc *sessionCtx) start(fs *flag.FlagSet, args []string, nargs func(int) bool) (*client.Client, int) {
	if code, ok := parseFlags(fs, args); !ok {
		return nil, code
	}
	if !nargs(fs.NArg()) {
		fs.Usage()
		return nil, exitUsage
	}
	cl, err := sc.client()
	if err != nil {
		return nil, sc.fail(err)
	}
	return cl, 0
}

// fail prints err and returns its exit code.
func (sc *sessionCtx) fail(err error) int {
	fmt.Fprintln(sc.stderr, "wovyr:", err)
	return classExit(sandbox.ClassOf(err))
}

// flags is a subcommand's flag set, with the daemon flags and a usage line.
func (sc *sessionCtx) flags(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(sc.groupName()+" "+name, flag.ContinueOnError)
	fs.SetOutput(sc.stderr)
	sc.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: wovyr %s %s\n\n", sc.groupName(), usage)
		fs.PrintDefaults()
	}
	return fs
}

func (sc *sessionCtx) groupName() string {
	if sc.group == "" {
		return "session"
	}
	return sc.group
}

// sessionMain is `wovyr session SUBCOMMAND`: sessions of a daemon
// (--remote). There is no local mode: a session outlives the command that
// made it, and only a daemon holds sandboxes between commands.
func sessionMain(ctx context.Context, g *globals, args []string) int {
	sc := &sessionCtx{g: g, stdout: os.Stdout, stderr: os.Stderr}
	return sc.dispatch(ctx, args)
}

func (sc *sessionCtx) dispatch(ctx context.Context, args []string) int {
	return sc.dispatchGroup(ctx, args, sessionCommands, "Sessions are long-lived sandboxes in a daemon (--remote): exec many commands in one\nfilesystem, copy files in and out.")
}

// dispatchGroup runs the subcommand args names, or prints the group's
// usage: intro, then cmds.
func (sc *sessionCtx) dispatchGroup(ctx context.Context, args []string, cmds []subcommand, intro string) int {
	if len(args) > 0 {
		for _, c := range cmds {
			if c.name == args[0] {
				return c.run(ctx, sc, args[1:])
			}
		}
	}
	w := sc.stdout
	if len(args) == 0 || args[0] != "help" && args[0] != "-h" && args[0] != "--help" {
		w = sc.stderr
	}
	fmt.Fprintf(w, "usage: wovyr %s COMMAND [flags] [ARGS]\n\n%s Commands:\n", sc.groupName(), intro)
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-7s %s\n", c.name, c.summary)
	}
	if w == sc.stdout {
		return 0
	}
	return exitUsage
}

// splitRemote splits "ID:PATH" (ok) from a local path.
func splitRemote(arg string) (id, path string, ok bool) {
	id, path, ok = strings.Cut(arg, ":")
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", "", false
	}
	return id, path, true
}
