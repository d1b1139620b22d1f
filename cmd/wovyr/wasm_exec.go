package main

import (
	"context"
	"os"

	"github.com/wovyr/wovyr/backend/wasm"
)

// wasmExecMain is `wovyr wasm-exec`: run one WASI module as this process
// (stdio passed through, the guest's exit code propagated), through the wasm
// backend's own code path. The container, gVisor and microVM backends run it
// inside their sandboxes for wasm workloads at those strengths. Its flags and
// exit codes are documented by wasm.ExecMain (`wovyr wasm-exec -help`).
func wasmExecMain(ctx context.Context, g *globals, args []string) int {
	return wasm.ExecMain(ctx, args, os.Stdin, os.Stdout, os.Stderr)
}
