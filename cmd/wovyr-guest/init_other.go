//go:build !linux

package main

import (
	"context"
	"fmt"
	"os"
)

// initMain exists only on Linux, where a microVM's init runs.
func initMain(context.Context) int {
	fmt.Fprintln(os.Stderr, "wovyr-guest init: only on Linux")
	return 2
}
