package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/wovyr/wovyr/backend/oci"
	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/plugin"
	"github.com/wovyr/wovyr/store"
)

// newPluginHost is the daemon's plugin host: compiled components sealed
// under the state dir, the operator's trust keys, the configured limits,
// plugins' key-value data in the store, and their outgoing HTTP through the
// daemon's egress service (none without one).
//
// With isolated (the node's manager), plugins of a trust class above wasm
// run out of process: each call in a sandbox at their floor, through the
// runner every OCI sandbox holds.
func newPluginHost(cfg config.Plugins, stateDir string, st *store.Store, network *egress.Service, isolated plugin.Runner, log *slog.Logger) (*plugin.Host, error) {
	keys, err := cfg.Keys()
	if err != nil {
		return nil, err
	}
	ts, err := plugin.NewTrustStore(keys)
	if err != nil {
		return nil, err
	}
	var kv plugin.KVStore // nil, not a nil *store.Store, where there is none
	if st != nil {
		kv = st
	}
	return plugin.NewHost(plugin.Config{Dir: filepath.Join(stateDir, "plugins"), Trust: ts, Log: log,
		Limits: plugin.Limits{Fuel: cfg.Fuel, Memory: cfg.Memory, WallMS: cfg.WallMS}, KV: kv, Egress: network,
		Isolated: isolated, IsolatedArgv: []string{oci.RunnerPath, "component-exec"}})
}

// startAnywhere is sessionCtx.start for commands written with flags after
// their arguments (`plugin install FILE --manifest M`): flags may come
// anywhere; it returns the arguments left, in order.
func (sc *sessionCtx) startAnywhere(fs *flag.FlagSet, args []string, nargs func(int) bool) (*client.Client, []string, int) {
	var pos []string
	for {
		if code, ok := parseFlags(fs, args); !ok {
			return nil, nil, code
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	if !nargs(len(pos)) {
		fs.Usage()
		return nil, nil, exitUsage
	}
	cl, err := sc.client()
	if err != nil {
		return nil, nil, sc.fail(err)
	}
	return cl, pos, 0
}

// pluginCommands are `wovyr plugin`'s subcommands, one per file.
var pluginCommands = []subcommand{
	{"install", "install a component with its manifest (admin): install FILE --manifest M", pluginInstallMain},
	{"list", "list the installed plugins and their functions", pluginListMain},
	{"call", "call a plugin's function: call NAME FUNC --args JSON", pluginCallMain},
	{"rm", "uninstall a plugin (admin): rm NAME", pluginRmMain},
}

// pluginMain is `wovyr plugin SUBCOMMAND`: component plugins of a daemon
// (--remote), as sessions are.
func pluginMain(ctx context.Context, g *globals, args []string) int {
	sc := &sessionCtx{g: g, group: "plugin", stdout: os.Stdout, stderr: os.Stderr}
	return sc.dispatchGroup(ctx, args, pluginCommands, "Plugins are WebAssembly components a daemon (--remote) hosts: typed functions behind\nWIT interfaces, granted only the interfaces their manifest names.")
}
