package main

import (
	"context"
	"fmt"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func versionMain(ctx context.Context, g *globals, args []string) int {
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v = "dev+" + s.Value[:12]
			}
		}
	}
	fmt.Println("wovyr", v)
	return 0
}
