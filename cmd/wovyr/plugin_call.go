package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
)

func pluginCallMain(ctx context.Context, sc *sessionCtx, args []string) int {
	fs := sc.flags("call", "call [flags] NAME FUNC [--args JSON] [--allow HOST:PORT]\n\nCalls FUNC of plugin NAME with JSON arguments, an object by parameter name or an\narray in order (docs/API.md has the JSON form of each WIT type). Prints the result\nvalue, and the plugin's log entries on stderr; with --json the whole result (end,\nerror, fuel, logs). --allow grants its outgoing HTTP (wovyr:host/http) a name and port. Exits 0 when the call ended\nok, 125 when the plugin trapped, 126 out of fuel, 124 past its deadline.")
	argsJSON := fs.String("args", "{}", "the arguments as JSON")
	jsonOut := fs.Bool("json", false, "print the whole result as JSON")
	var allow multiFlag
	fs.Var(&allow, "allow", "egress allow rule for the plugin's outgoing HTTP, HOST:PORT[,PORT...] as for wovyr run (repeatable; default: no egress)")
	cl, pos, code := sc.startAnywhere(fs, args, func(n int) bool { return n == 2 })
	if cl == nil {
		return code
	}
	call := client.PluginCall{Function: pos[1], Args: json.RawMessage(*argsJSON)}
	for _, a := range allow {
		rule, err := parseAllow(a)
		if err != nil {
			return sc.fail(sandbox.Errorf(sandbox.BadInput, "allow", "%v", err))
		}
		call.Network.Allow = append(call.Network.Allow, rule)
	}
	r, err := cl.CallPluginWith(ctx, pos[0], call)
	if err != nil {
		return sc.fail(err)
	}
	for _, e := range r.Logs {
		fmt.Fprintf(sc.stderr, "plugin %s: %s%s\n", e.Level, e.Message, logFields(e.Fields))
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

// logFields writes a log entry's fields as " k=v", sorted.
func logFields(f map[string]string) string {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%s", k, f[k])
	}
	return b.String()
}
