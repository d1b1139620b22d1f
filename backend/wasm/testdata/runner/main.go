// Command runner is `wovyr wasm-exec` alone, built by TestRunnerLinksStatically
// as a static binary (the form the container, gVisor and microVM backends run).
package main

import (
	"context"
	"os"

	"github.com/wovyr/wovyr/backend/wasm"
)

func main() {
	os.Exit(wasm.ExecMain(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
