package main

import (
	"context"
	"encoding/json"
	"fmt"
)

func pluginCallMain(ctx context.Context, sc *sessionCtx, args []string) int {
	fs := sc.flags("call", "call [flags] NAME FUNC [--args JSON]\n\nCalls FUNC of plugin NAME with JSON arguments, an object by parameter name or an\narray in order (docs/API.md has the JSON form of each WIT type). Prints the result\nvalue; with --json the whole result (end, error, fuel). Exits 0 when the call ended\nok, 125 when the plugin trapped, 126 out of fuel, 124 past its deadline.")
	argsJSON := fs.String("args", "{}", "the arguments as JSON")
	jsonOut := fs.Bool("json", false, "print the whole result as JSON")
	cl, pos, code := sc.startAnywhere(fs, args, func(n int) bool { return n == 2 })
	if cl == nil {
		return code
	}
	r, err := cl.CallPlugin(ctx, pos[0], pos[1], json.RawMessage(*argsJSON))
	if err != nil {
		return sc.fail(err)
	}
	if *jsonOut {
		printJSONTo(sc.stdout, r)
	} else if r.End == "ok" {
		fmt.Fprintln(sc.stdout, string(r.Value))
	}
	switch r.End {
	case "ok":
		return 0
	case "out-of-fuel":
		fmt.Fprintln(sc.stderr, "wovyr: plugin call ran out of fuel:", r.Error)
		return exitOutOfFuel
	case "timeout":
		fmt.Fprintln(sc.stderr, "wovyr: plugin call passed its deadline:", r.Error)
		return exitTimeout
	case "cancelled":
		fmt.Fprintln(sc.stderr, "wovyr: plugin call cancelled:", r.Error)
		return exitKilled
	}
	fmt.Fprintf(sc.stderr, "wovyr: plugin call ended %s: %s\n", r.End, r.Error)
	return exitBackendFailure
}
