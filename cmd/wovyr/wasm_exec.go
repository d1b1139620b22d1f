package main

import (
	"context"
	"fmt"
	"os"

	"github.com/wovyr/wovyr/backend/wasm"
	"github.com/wovyr/wovyr/plugin"
)

// wasmExecMain is `wovyr wasm-exec`: run one WASI module as this process
// (stdio passed through, the guest's exit code propagated), through the wasm
// backend's own code path. The container, gVisor and microVM backends run it
// inside their sandboxes for wasm workloads at those strengths. Its flags and
// exit codes are documented by wasm.ExecMain (`wovyr wasm-exec -help`).
func wasmExecMain(ctx context.Context, g *globals, args []string) int {
	return wasm.ExecMain(ctx, args, os.Stdin, os.Stdout, os.Stderr)
}

// wasmWorkerMain is `wovyr wasm-worker`: one of the wasm backend's worker
// processes, which run directory-granted invocations one at a time under a
// per-job RLIMIT_NOFILE (wasm.WorkerMain). Only a wasm.Backend starts it.
func wasmWorkerMain(ctx context.Context, g *globals, args []string) int {
	if os.Getenv(wasm.WorkerEnv) == "" || len(args) != 0 {
		fmt.Fprintln(os.Stderr, "wovyr wasm-worker: internal command, started by the wasm backend over pipes")
		return exitUsage
	}
	return wasm.WorkerMain(ctx, os.Stdin, os.Stdout)
}

// wasmWorker is wasm.Config.Worker: this binary, as `wovyr wasm-worker`.
func wasmWorker() ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("wasm worker: %w", err)
	}
	return []string{exe, "wasm-worker"}, nil
}

// componentExecMain is `wovyr component-exec`: the plugin runner. The
// daemon's plugin host runs it inside a sandbox at the floor of a plugin
// whose trust class is above wasm (plugin.ExecMain).
func componentExecMain(ctx context.Context, g *globals, args []string) int {
	return plugin.ExecMain(ctx, args, os.Stdin, os.Stdout, os.Stderr)
}
