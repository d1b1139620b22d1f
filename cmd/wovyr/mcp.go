package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/mcp"
	"github.com/wovyr/wovyr/sandbox"
)

// mcpCmd is `wovyr mcp`: the MCP tools over stdio for a local agent, each
// tool call a call of a daemon's API (package mcp). stdout carries the
// protocol alone; logs go to stderr.
type mcpCmd struct {
	remote, token, trust, configFile string
	images                           multiFlag
	maxOutput                        int64
}

// defaultRemote is the daemon `wovyr serve` starts without --listen.
const defaultRemote = "http://127.0.0.1:8080"

func mcpMain(ctx context.Context, g *globals, args []string) int {
	c := &mcpCmd{}
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.StringVar(&c.remote, "remote", cmp.Or(os.Getenv("WOVYR_REMOTE"), defaultRemote), "the wovyr daemon's URL (default $WOVYR_REMOTE, else "+defaultRemote+")")
	fs.StringVar(&c.token, "token", "", "bearer token, its tenant the tools' (default $WOVYR_TOKEN, else the daemon's bootstrap token in the state dir)")
	fs.StringVar(&c.configFile, "config", "", "a daemon config file whose \"mcp\" section to use (trust, images, max_output)")
	fs.StringVar(&c.trust, "trust", "", "trust class of every tool call: trusted, internal, untrusted, hostile (default untrusted, or the config's)")
	fs.Var(&c.images, "image", "LANG=IMAGE: the template run_code uses for python, javascript or bash (repeatable)")
	fs.Int64Var(&c.maxOutput, "max-output", 0, "bytes of stdout, stderr or a file one tool result carries (default 64 KiB, or the config's)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: wovyr mcp [flags]\n\nServes wovyr's MCP tools on stdin/stdout for a local agent (e.g. Claude Desktop's\nmcpServers); every tool call is an API call of the daemon at --remote.\n\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return exitUsage
	}
	cfg, err := c.config()
	if err != nil {
		fmt.Fprintln(os.Stderr, "wovyr mcp:", err)
		return exitUsage
	}
	tools, err := mcp.New(mcp.Options{MCP: cfg, Version: version, Logger: g.logger()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "wovyr mcp:", err)
		return exitUsage
	}
	api := client.New(c.remote, daemonToken(g, c.token), nil)
	if err := tools.Server(api).Run(ctx, &sdk.StdioTransport{}); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "wovyr mcp:", err)
		return exitBackendFailure
	}
	return 0
}

// config is the MCP configuration: the config file's, then the flags.
func (c *mcpCmd) config() (config.MCP, error) {
	m := config.Default().MCP
	if c.configFile != "" {
		full, err := config.Load(c.configFile)
		if err != nil {
			return m, err
		}
		m = full.MCP
	}
	if c.trust != "" {
		t, err := sandbox.ParseTrustClass(c.trust)
		if err != nil {
			return m, err
		}
		m.Trust = t
	}
	for _, kv := range c.images {
		lang, img, ok := strings.Cut(kv, "=")
		if !ok || img == "" {
			return m, fmt.Errorf("--image %q: want LANG=IMAGE", kv)
		}
		m.Images[lang] = img
	}
	if c.maxOutput != 0 {
		m.MaxOutput = c.maxOutput
	}
	return m, nil
}
