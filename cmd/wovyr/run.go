package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// runCmd is `wovyr run`.
type runCmd struct {
	trust, backend, floor, tenant string
	timeout                       time.Duration
	memory                        string
	wasmFile, wasmInit, workdir   string
	pids                          int
	env                           multiFlag
	files                         multiFlag
	jsonOut                       bool
	remote, token                 string // --remote: through a daemon
	tenantSet                     bool
	more                          invocationFlags
}

func runMain(ctx context.Context, g *globals, args []string) int {
	c := &runCmd{}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.StringVar(&c.trust, "trust", "internal", "trust class: trusted, internal, untrusted, hostile")
	fs.StringVar(&c.backend, "backend", "", "run on exactly this backend (it must meet the trust floor)")
	fs.StringVar(&c.floor, "floor", "", "explicit minimum strength: native, wasm, container, gvisor, microvm")
	fs.StringVar(&c.tenant, "tenant", "local", "tenant name")
	fs.DurationVar(&c.timeout, "timeout", 0, "wall-clock limit (default 30s)")
	fs.StringVar(&c.memory, "memory", "", "memory limit, e.g. 64M, 1G (default 256M)")
	fs.IntVar(&c.pids, "pids", 0, "process/thread limit (default 128)")
	fs.Var(&c.env, "env", "KEY=VALUE for the workload's environment (repeatable; nothing is inherited)")
	fs.Var(&c.files, "file", "DEST=SRC: copy host file SRC into the workspace as DEST (repeatable; needs root: without it wasm has no workspace)")
	fs.BoolVar(&c.jsonOut, "json", false, "print the result as JSON")
	fs.StringVar(&c.remote, "remote", "", "run through the wovyr daemon at this URL (e.g. http://127.0.0.1:8080)")
	fs.StringVar(&c.token, "token", "", "bearer token for --remote (default $WOVYR_TOKEN, else the daemon's bootstrap token in the state dir)")
	fs.StringVar(&c.wasmFile, "wasm", "", "run this WASI module (ARGV is then its arguments, argv[0] included)")
	fs.StringVar(&c.workdir, "workdir", "", "with --wasm: the guest path of the module's workspace, as wasmtime's --dir HOST::GUEST names it ('/' works; default /workspace)")
	fs.StringVar(&c.wasmInit, "init", "", "with --wasm: the module's init export, run once per module and snapshotted (default: wizer.initialize when the module exports it)")
	c.more.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: wovyr run [flags] -- ARGV...\n\nStdin is passed through when it is a pipe or a file.\n\n")
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\n%s", exitCodesHelp)
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	fs.Visit(func(f *flag.Flag) { c.tenantSet = c.tenantSet || f.Name == "tenant" })
	inv, err := c.invocation(fs.Args())
	if err != nil {
		return c.fail(err)
	}
	if c.remote != "" {
		return c.runRemote(ctx, g, inv)
	}
	if inv.Workload.Kind != sandbox.KindWasm {
		// Without root only wasm runs (unprivileged, in its own mode).
		if code := refuseUnlessRoot("wovyr run of a command"); code != 0 {
			return code
		}
	}
	if err := makeStateDir(g.stateDir); err != nil {
		return c.fail(sandbox.Wrap(sandbox.BackendFailure, err, "start"))
	}
	if err := storeFree(g); err != nil {
		return c.fail(err)
	}
	n, err := openNode(g)
	if err != nil {
		return c.fail(sandbox.Wrap(sandbox.BackendFailure, err, "start"))
	}
	defer n.Close()
	res, err := c.execute(ctx, n, inv)
	if err != nil {
		return c.fail(err)
	}
	return c.report(res)
}

// invocation builds and validates the request; nothing starts on error.
func (c *runCmd) invocation(argv []string) (*sandbox.Invocation, error) {
	inv := &sandbox.Invocation{
		ID:       sandbox.NewID(),
		Tenant:   c.tenant,
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: argv, Env: []string(c.env)},
		Limits:   sandbox.Limits{Wall: c.timeout, Pids: c.pids},
	}
	if inv.Workload.Env == nil {
		inv.Workload.Env = []string{}
	}
	if c.wasmInit != "" && c.wasmFile == "" {
		return nil, sandbox.Errorf(sandbox.BadInput, "init", "--init names a wasm module's init export: it needs --wasm")
	}
	if c.workdir != "" && c.wasmFile == "" {
		return nil, sandbox.Errorf(sandbox.BadInput, "workdir", "--workdir places a wasm module's workspace: it needs --wasm (a command's workspace is %s)", sandbox.WorkspaceDir)
	}
	if c.wasmFile != "" {
		mod, err := os.ReadFile(c.wasmFile)
		if err != nil {
			return nil, sandbox.Wrap(sandbox.BadInput, err, "wasm")
		}
		inv.Workload.Kind, inv.Workload.Module, inv.Workload.Init = sandbox.KindWasm, mod, c.wasmInit
		inv.Workload.Workdir = c.workdir
		if len(argv) == 0 {
			inv.Workload.Argv = []string{c.wasmFile}
		}
	}
	if err := c.more.apply(inv); err != nil {
		return nil, err
	}
	var err error
	if inv.Policy.Trust, err = sandbox.ParseTrustClass(c.trust); err != nil {
		return nil, err
	}
	if inv.Policy.Floor, err = sandbox.ParseStrength(c.floor); err != nil {
		return nil, err
	}
	if c.backend != "" {
		if inv.Policy.Preference, err = sandbox.ParseStrength(c.backend); err != nil {
			return nil, sandbox.Errorf(sandbox.BadInput, "backend", "unknown backend %q", c.backend)
		}
	}
	if c.memory != "" {
		if inv.Limits.Memory, err = parseSize(c.memory); err != nil {
			return nil, sandbox.Errorf(sandbox.BadInput, "memory", "%v", err)
		}
	}
	if c.timeout < 0 {
		return nil, sandbox.Errorf(sandbox.BadInput, "timeout", "must not be negative")
	}
	if c.pids < 0 {
		return nil, sandbox.Errorf(sandbox.BadInput, "pids", "must not be negative")
	}
	for _, f := range c.files {
		dest, src, ok := strings.Cut(f, "=")
		if !ok {
			return nil, sandbox.Errorf(sandbox.BadInput, "file", "want DEST=SRC, got %q", f)
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return nil, sandbox.Wrap(sandbox.BadInput, err, "file %s", dest)
		}
		inv.Workload.Files = append(inv.Workload.Files, sandbox.File{Path: dest, Data: data})
	}
	if inv.Workload.Stdin, err = readStdin(); err != nil {
		return nil, err
	}
	return inv, inv.Validate()
}

// execute records, selects, runs and records again.
func (c *runCmd) execute(ctx context.Context, n *node, inv *sandbox.Invocation) (*sandbox.Result, error) {
	// An explicit backend below the floor is refused before anything else,
	// with that reason rather than the other backends' states.
	if cand, ok := n.mgr.Backend(c.backend); ok {
		if required := (sandbox.Floors{}).Required(inv.Policy); cand.Strength() < required {
			return nil, &sandbox.FloorError{Required: required, Kind: inv.Workload.Kind, Rejections: []sandbox.Rejection{{
				Backend: c.backend, Strength: cand.Strength(),
				Reason: fmt.Sprintf("below the required strength %s (trust %s)", required, inv.Policy.Trust)}}}
		}
	}
	b, err := n.mgr.SelectFor(ctx, inv.Policy, inv.Workload.Kind, inv.Resources.GPU)
	if err != nil {
		return nil, err
	}
	if inv.Resources.GPU > 0 {
		// Devices are assigned, scrubbed and quarantined by the daemon's
		// allocator; a one-shot run has none to give.
		return nil, sandbox.Errorf(sandbox.BadInput, "resources.gpu", "GPU invocations run through the daemon (wovyr serve), which assigns the devices")
	}
	// An image the selected backend cannot run is bad input, refused
	// before anything is recorded (as the daemon does at submit); so is a
	// workload it refuses here (unprivileged wasm: files in or out).
	if err := sandbox.CheckRunnable(b, &inv.Workload); err != nil {
		return nil, err
	}
	if c.backend != "" && b.Name() != c.backend {
		cand, _ := n.mgr.Backend(c.backend)
		why := "not registered on this node"
		required := sandbox.Floors{}.Required(inv.Policy)
		if cand != nil {
			for _, st := range n.mgr.Detect(ctx, false) {
				if st.Name == c.backend {
					why = st.Capability.Reason
					if st.Capability.Available {
						why = st.CertReason
					}
				}
			}
		}
		return nil, &sandbox.FloorError{Required: required, Kind: inv.Workload.Kind,
			Rejections: []sandbox.Rejection{{Backend: c.backend, Strength: inv.Policy.Preference, Reason: why}}}
	}
	queued := time.Now()
	if err := n.withStore(func(s *store.Store) error { return s.Begin(inv, store.Running, queued) }); err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "record invocation")
	}
	res, runErr := n.mgr.Run(ctx, inv)
	final, st := res, store.Done
	if runErr != nil {
		final, st = &sandbox.Result{ID: inv.ID, ExitCode: -1, Class: sandbox.ClassOf(runErr), Error: runErr.Error()}, store.Failed
	}
	final.Timings.Queued = queued
	if err := n.withStore(func(s *store.Store) error { return s.Transition(inv.ID, st, final, time.Now()) }); err != nil {
		n.log.Error("record result", "id", inv.ID, "error", err)
	}
	return res, runErr
}

// report prints the result, writes its collected files and returns
// wovyr's exit code.
func (c *runCmd) report(res *sandbox.Result) int {
	code := printResult(os.Stdout, os.Stderr, res, c.jsonOut)
	if !c.jsonOut {
		if err := writeCollected(c.more.collectDir, res.Files); err != nil {
			fmt.Fprintln(os.Stderr, "wovyr:", err)
			return classExit(sandbox.ClassOf(err))
		}
	}
	return code
}

// printResult prints res as wovyr run does (its output on stdout and
// stderr and wovyr's lines about it, or JSON) and returns wovyr's exit
// code for it: the workload's own, or its class's.
func printResult(stdout, stderr io.Writer, res *sandbox.Result, jsonOut bool) int {
	if jsonOut {
		printJSONTo(stdout, res)
	} else {
		stdout.Write(res.Stdout)
		stderr.Write(res.Stderr)
		if res.StdoutTruncated || res.StderrTruncated {
			fmt.Fprintf(stderr, "wovyr: output truncated (stdout %v, stderr %v)\n", res.StdoutTruncated, res.StderrTruncated)
		}
		if res.Class != sandbox.OK {
			fmt.Fprintf(stderr, "wovyr: %s: %s\n", res.Class, res.Error)
		}
	}
	if res.Class != sandbox.OK {
		return classExit(res.Class)
	}
	if res.ExitCode < 0 || res.ExitCode > 255 {
		// No exit status a process can have (issue #25: a -1 became an
		// undocumented 255): the backend failed to say how the job ended.
		fmt.Fprintf(stderr, "wovyr: backend-failure: the workload's exit status is unknown (%d)\n", res.ExitCode)
		return exitBackendFailure
	}
	return res.ExitCode
}

// fail prints err and returns its exit code.
func (c *runCmd) fail(err error) int {
	if c.jsonOut {
		b, _ := json.MarshalIndent(map[string]any{"class": sandbox.ClassOf(err), "field": sandbox.FieldOf(err), "error": err.Error()}, "", "  ")
		fmt.Println(string(b))
	} else {
		fmt.Fprintln(os.Stderr, "wovyr:", err)
	}
	return classExit(sandbox.ClassOf(err))
}

func classExit(c sandbox.Class) int {
	switch c {
	case sandbox.BadInput:
		return exitBadInput
	case sandbox.FloorUnmet:
		return exitFloorUnmet
	case sandbox.Unenforceable:
		return exitUnenforceable
	case sandbox.OOM:
		return exitOOM
	case sandbox.Timeout:
		return exitTimeout
	case sandbox.OutOfFuel:
		return exitOutOfFuel
	case sandbox.Killed:
		return exitKilled
	case sandbox.NotFound, sandbox.Conflict:
		return exitBadInput // no such session, or one that has ended
	}
	return exitBackendFailure
}

// readStdin returns wovyr's stdin when it is a pipe or a regular file.
func readStdin() ([]byte, error) {
	st, err := os.Stdin.Stat()
	if err != nil || st.Mode()&(os.ModeNamedPipe) == 0 && !st.Mode().IsRegular() {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(os.Stdin, sandbox.MaxStdinBytes+1))
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BadInput, err, "read stdin")
	}
	if len(b) > sandbox.MaxStdinBytes {
		return nil, sandbox.Errorf(sandbox.BadInput, "stdin", "stdin exceeds %d bytes", sandbox.MaxStdinBytes)
	}
	return b, nil
}

// parseSize parses 123, 64K, 64M, 1G (powers of 1024).
func parseSize(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad size %q (want e.g. 65536, 64K, 64M, 1G)", s)
	}
	return n * mult, nil
}

// multiFlag collects a repeatable flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
