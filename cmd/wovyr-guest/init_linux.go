package main

import (
	"context"
	"fmt"
	"os"

	"github.com/wovyr/wovyr/agent"
)

// initMain is PID 1 of a wovyr microVM; see agent.VMInit. It never returns
// normally: the VM powers off.
func initMain(ctx context.Context) int {
	if err := agent.VMInit(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "wovyr-guest init:", err)
		return 1
	}
	return 0
}
