package wasm

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/sandbox"
)

// Exit codes of the wasm-exec runner when the guest did not exit by itself;
// they are wovyr's own CLI codes. A guest that exits (even under class oom)
// passes its own code through, so the -report file is what disambiguates.
const (
	ExitUsage          = 2   // bad flags
	ExitBadInput       = 120 // unreadable or invalid module, bad limits
	ExitUnenforceable  = 122 // a policy the backend cannot enforce
	ExitOOM            = 123 // the guest trapped at its memory limit
	ExitTimeout        = 124 // the wall deadline passed
	ExitBackendFailure = 125 // the runner or Wasmtime failed
	ExitOutOfFuel      = 126 // the fuel ran out
	ExitKilled         = 127 // cancelled (SIGINT/SIGTERM to the runner)
	ExitTrap           = 134 // the guest trapped (128+SIGABRT)
)

const execHelperEnv = "WOVYR_WASM_EXEC_TEST_HELPER"

// ExecMain is `wovyr wasm-exec`: it runs one WASI module as this process,
// through the same code path as Sandbox.Run, with the process's stdio passed
// through and the guest's exit code propagated. The container, gVisor and
// microVM backends run it inside their sandboxes for wasm workloads.
//
//	wovyr wasm-exec [flags] MODULE.wasm [-- ARGS...]
//
// args excludes the program and subcommand names. It returns the exit code.
func ExecMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("wasm-exec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		fuel    = fs.Uint64("fuel", 0, "fuel budget (0: unmetered)")
		memory  = fs.Int64("memory-mib", sandbox.DefaultMemory>>20, "linear memory limit in MiB")
		wall    = fs.Duration("wall", sandbox.DefaultWall, "wall-clock deadline")
		nofile  = fs.Int("nofile", sandbox.DefaultNoFile, "descriptors the guest may open (this process's RLIMIT_NOFILE)")
		argv0   = fs.String("argv0", "", "argv[0] as the guest sees it (default: the module's file name)")
		work    = fs.String("work", "", "host directory preopened read-write at -workdir (default: none)")
		workdir = fs.String("workdir", sandbox.WorkspaceDir, "the guest path of -work's directory")
		state   = fs.String("state", "", "state dir for the compiled-module cache (default: a temporary one)")
		report  = fs.String("report", "", "write the JSON result (class, exit code, usage) to this file")
		init    = fs.String("init", "", "the module's init export, run once and snapshotted before the guest starts (default: wizer.initialize when exported)")
		envs    []string
		readDir []string
	)
	fs.Func("env", "KEY=VALUE in the guest's environment (repeatable; nothing is inherited)", func(s string) error { envs = append(envs, s); return nil })
	fs.Func("ro", "HOST:GUEST directory granted read-only (repeatable)", func(s string) error { readDir = append(readDir, s); return nil })
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: wovyr wasm-exec [flags] MODULE.wasm [-- ARGS...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return ExitUsage
	}
	if fs.NArg() < 1 {
		fs.Usage()
		return ExitUsage
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "wasm-exec:", err)
		return exitCode(&sandbox.Result{Class: sandbox.ClassOf(err)})
	}
	if stdin != os.Stdin || stdout != os.Stdout || stderr != os.Stderr {
		return fail(errors.New("stdio must be the process's own (the guest inherits file descriptors 0-2)"))
	}
	modPath := fs.Arg(0)
	module, err := os.ReadFile(modPath)
	if err != nil {
		return fail(sandbox.Wrap(sandbox.BadInput, err, "module"))
	}
	if *nofile < 1 || *nofile > 1<<20 {
		fmt.Fprintf(stderr, "wasm-exec: -nofile %d outside [1, 1048576]\n", *nofile)
		return ExitUsage
	}
	if *memory < 1 || *memory > 4096 {
		fmt.Fprintf(stderr, "wasm-exec: -memory-mib %d outside [1, 4096]\n", *memory)
		return ExitUsage
	}
	mem := *memory << 20
	cfg := Config{StateDir: *state, Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if cfg.StateDir == "" {
		d, err := os.MkdirTemp("", "wovyr-wasm-exec-")
		if err != nil {
			return fail(err)
		}
		defer os.RemoveAll(d)
		cfg.StateDir = d
	}
	if cfg.StateDir, err = filepath.Abs(cfg.StateDir); err != nil {
		return fail(err)
	}
	for _, d := range readDir {
		host, guest, ok := strings.Cut(d, ":")
		if !ok {
			fmt.Fprintf(stderr, "wasm-exec: -ro %q: want HOST:GUEST\n", d)
			return ExitUsage
		}
		cfg.Preopens = append(cfg.Preopens, Preopen{Host: host, Guest: guest})
	}
	// One invocation at a time: a small pool keeps the reservation small.
	cfg.Engine = wasmcapi.EngineConfig{PoolSlots: 2}
	b, err := New(cfg)
	if err != nil {
		return fail(err)
	}
	defer b.Close()
	rest := fs.Args()[1:]
	if len(rest) > 0 && rest[0] == "--" {
		rest = rest[1:]
	}
	name := *argv0
	if name == "" {
		name = filepath.Base(modPath)
	}
	in := &sandbox.Invocation{
		Tenant: "wasm-exec",
		Workload: sandbox.Workload{
			Kind: sandbox.KindWasm, Module: module, Init: *init,
			Argv: append([]string{name}, rest...), Env: envs, Workdir: *workdir,
		},
		Limits: sandbox.Limits{Wall: *wall, Memory: mem, Fuel: *fuel, NoFile: *nofile},
		Policy: sandbox.Policy{Trust: sandbox.Internal},
	}
	opts := runOpts{inheritStdio: true}
	if *work != "" {
		if opts.workDir, err = filepath.Abs(*work); err != nil {
			return fail(err)
		}
	}
	// One invocation per process: the runner bounds its own descriptors,
	// as a worker does per job (worker_main.go).
	var fds fdBaseline
	err = b.started()
	var held []uint64
	if err == nil {
		held, err = fds.get(b.modules)
	}
	if err == nil {
		_, err = boundFDs(*nofile, held)
	}
	if err != nil {
		return fail(sandbox.Wrap(sandbox.BackendFailure, err, "descriptor bound"))
	}
	res, err := b.run(ctx, in, opts)
	if err != nil {
		res = &sandbox.Result{Class: sandbox.ClassOf(err), Error: err.Error(), ExitCode: -1}
		fmt.Fprintln(stderr, "wasm-exec:", err)
	}
	code := exitCode(res)
	if *report != "" {
		if b, err := json.Marshal(res); err == nil {
			if err := os.WriteFile(*report, b, 0o600); err != nil {
				fmt.Fprintln(stderr, "wasm-exec: report:", err)
			}
		}
	}
	return code
}

func exitCode(res *sandbox.Result) int {
	switch {
	case res.Class == sandbox.OK && res.Signal == "":
		return res.ExitCode & 0xff
	case res.Class == sandbox.OOM && res.Signal == "":
		return res.ExitCode & 0xff
	case res.Class == sandbox.Timeout:
		return ExitTimeout
	case res.Class == sandbox.OutOfFuel:
		return ExitOutOfFuel
	case res.Class == sandbox.Killed:
		return ExitKilled
	case res.Class == sandbox.OOM:
		return ExitOOM
	case res.Class == sandbox.OK: // a trap
		return ExitTrap
	case res.Class == sandbox.BadInput:
		return ExitBadInput
	case res.Class == sandbox.Unenforceable:
		return ExitUnenforceable
	}
	return ExitBackendFailure
}
