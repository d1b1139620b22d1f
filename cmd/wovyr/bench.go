package main

import (
	"context"
	"fmt"
)

func benchMain(ctx context.Context, g *globals, args []string) int {
	fmt.Println("TODO")
	return 0
}
