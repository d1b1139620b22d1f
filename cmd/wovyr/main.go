// Command wovyr runs tool invocations in sandboxes: one-shot from the
// command line with an embedded state store, or as a daemon (wovyr serve).
//
// Each subcommand lives in its own file as a small struct with a run method;
// the commands only parse and call the packages that do the work.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, g *globals, args []string) int
}

func commands() []command {
	return []command{
		{"run", "run one invocation", runMain},
		{"serve", "run the daemon: HTTP API with tenants, durable records, metrics", serveMain},
		{"backends", "show each backend: strength, availability, certification, and how old its probe is (--probe: probe now)", backendsMain},
		{"certify", "run the escape battery and record certifications", certifyMain},
		{"bench", "measure wovyr against the raw peers, side by side", benchMain},
		{"image", "build, import, list and remove root filesystem templates", imageMain},
		{"mcp", "serve the MCP tools on stdio for a local agent, through a daemon", mcpMain},
		{"session", "long-lived sandboxes in a daemon: create, exec, cp, ls, rm", sessionMain},
		{"plugin", "WebAssembly component plugins in a daemon: install, list, call, rm", pluginMain},
		{"version", "print the version", versionMain},
		{"wasm-exec", "run one WASI module as this process (the runner inside stronger sandboxes)", wasmExecMain},
		{"wasm-worker", "internal: the wasm backend's worker process (started by wovyr itself)", wasmWorkerMain},
		{"component-exec", "call one function of a WebAssembly component as this process (the plugin runner inside stronger sandboxes)", componentExecMain},
	}
}

// Exit codes of wovyr's own failures. When the workload ran, wovyr exits
// with the workload's own code instead (128+N if signal N ended it), so a
// workload that itself exits 120-127 is indistinguishable here: use --json.
const (
	exitUsage          = 2
	exitBadInput       = 120
	exitFloorUnmet     = 121
	exitUnenforceable  = 122
	exitOOM            = 123
	exitTimeout        = 124
	exitBackendFailure = 125
	exitOutOfFuel      = 126
	exitKilled         = 127
)

const exitCodesHelp = `Exit codes (wovyr itself returns only 0, 2 and 120-127):
  the workload's own exit code when it ran to completion (128+N if signal N ended it);
       127 with a "wovyr: ..." line on stderr when its program could not be started
       (not found, not executable), on every backend
  0    success (commands other than run)
  2    usage error
  120  bad input (nothing was started), also an unknown or ended session
  121  floor unmet: no certified, available backend at or above the required strength
  122  a policy cannot be enforced: a network policy no eligible backend enforces, or
       files in or out (--file, --collect) for wasm without root (no disk quota)
  123  the workload hit its memory limit (oom)
  124  the workload hit its deadline (timeout)
  125  wovyr or the backend failed (backend-failure), also a result without a valid exit status
  126  the wasm workload ran out of fuel
  127  cancelled (interrupt or shutdown)
`

// prerequisitesHelp is what a fresh node needs before each backend is
// selectable: a backend runs work only once the escape battery certified
// it here, and the battery needs what the backend's sandboxes need.
const prerequisitesHelp = `Before a backend runs work here, the escape battery must certify it (as root):
  every backend       wovyr certify  (or wovyr certify --backend NAME)
  container, gvisor   first wovyr image build busybox (the battery's template; gvisor also needs runsc)
  microvm             first wovyr image build microvm (guest kernel, initramfs, default root disk;
                      a template's root disk is built from it on first use)
wovyr backends shows what each backend lacks.
`

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: wovyr [--state-dir DIR] [--log-level LEVEL] [--guest PATH] [--container-runtime auto|crun|runc] COMMAND [ARGS]\n\nCommands:\n")
	cmds := commands()
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].name < cmds[j].name })
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'wovyr COMMAND --help' for a command's flags.\n\n%s\n%s\n%s", prerequisitesHelp, rootHelp(), exitCodesHelp)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(dispatch(ctx, os.Args[1:]))
}

func dispatch(ctx context.Context, args []string) int {
	g, rest, err := parseGlobals(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wovyr:", err)
		return exitUsage
	}
	if len(rest) == 0 || rest[0] == "help" || rest[0] == "-h" || rest[0] == "--help" {
		usage(os.Stdout)
		if len(rest) == 0 {
			return exitUsage
		}
		return 0
	}
	for _, c := range commands() {
		if c.name == rest[0] {
			g.cmd = c.name
			return c.run(ctx, g, rest[1:])
		}
	}
	fmt.Fprintf(os.Stderr, "wovyr: unknown command %q\n\n", rest[0])
	usage(os.Stderr)
	return exitUsage
}
