package main

import (
	"context"
	"os"

	"github.com/wovyr/wovyr/sandbox"
)

func pluginInstallMain(ctx context.Context, sc *sessionCtx, args []string) int {
	fs := sc.flags("install", "install [flags] FILE --manifest M\n\nInstalls the component FILE under the manifest M (JSON: name, component digest,\ntrust, capabilities, signature); a plugin of the same name is replaced. Needs an\nadmin token. Prints the plugin as JSON.")
	manifest := fs.String("manifest", "", "the plugin's manifest (JSON file)")
	cl, pos, code := sc.startAnywhere(fs, args, func(n int) bool { return n == 1 })
	if cl == nil {
		return code
	}
	if *manifest == "" {
		return sc.fail(sandbox.Errorf(sandbox.BadInput, "manifest", "give the plugin's manifest with --manifest FILE"))
	}
	m, err := os.ReadFile(*manifest)
	if err != nil {
		return sc.fail(sandbox.Wrap(sandbox.BadInput, err, "read the manifest"))
	}
	wasm, err := os.ReadFile(pos[0])
	if err != nil {
		return sc.fail(sandbox.Wrap(sandbox.BadInput, err, "read the component"))
	}
	p, err := cl.InstallPlugin(ctx, m, wasm)
	if err != nil {
		return sc.fail(err)
	}
	printJSONTo(sc.stdout, p)
	return 0
}
