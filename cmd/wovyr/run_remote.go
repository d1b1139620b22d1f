package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// runRemote is `wovyr run --remote URL`: the same invocation through the
// daemon, with the same printed output and exit codes as a local run.
func (c *runCmd) runRemote(ctx context.Context, g *globals, inv *sandbox.Invocation) int {
	inv.ID = "" // the daemon assigns it
	if !c.tenantSet {
		inv.Tenant = "" // the token's tenant
	}
	res, err := client.New(c.remote, daemonToken(g, c.token), nil).Run(ctx, inv)
	if err != nil {
		return c.fail(err)
	}
	return c.report(res)
}

// daemonToken is the bearer token for a --remote command: flag, else
// $WOVYR_TOKEN, else the daemon's bootstrap token in the state dir.
func daemonToken(g *globals, flag string) string {
	if flag != "" {
		return flag
	}
	if tok := os.Getenv("WOVYR_TOKEN"); tok != "" {
		return tok
	}
	b, _ := os.ReadFile(filepath.Join(g.stateDir, tokenFile))
	return strings.TrimSpace(string(b))
}

// storeFree fails fast when a daemon holds the state directory, instead of
// waiting on its lock.
func storeFree(g *globals) error {
	s, err := store.Open(g.stateDir, 100*time.Millisecond)
	if errors.Is(err, store.ErrLocked) {
		return sandbox.Wrap(sandbox.BackendFailure, err,
			"a wovyr daemon holds this state directory: run through it with wovyr run --remote http://ADDR (or stop it)")
	}
	if err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "open state")
	}
	return s.Close()
}
