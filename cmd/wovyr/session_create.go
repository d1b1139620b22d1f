package main

import (
	"context"
	"fmt"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
)

// sessionCreateCmd is `wovyr session create`.
type sessionCreateCmd struct {
	trust, prefer, image, memory, disk string
	wall, idle, lifetime               time.Duration
	pids                               int
	jsonOut                            bool
}

func sessionCreateMain(ctx context.Context, sc *sessionCtx, args []string) int {
	c := &sessionCreateCmd{}
	fs := sc.flags("create", "create [flags]")
	fs.StringVar(&c.trust, "trust", "untrusted", "trust class: trusted, internal, untrusted, hostile")
	fs.StringVar(&c.prefer, "prefer", "", "at least this strength: container, gvisor, microvm")
	fs.StringVar(&c.image, "image", "", "root filesystem template (default: the backend's)")
	fs.DurationVar(&c.wall, "wall", 0, "each exec's default and longest wall-clock limit (default 30s)")
	fs.StringVar(&c.memory, "memory", "", "memory limit of the whole session, e.g. 512M (default 256M)")
	fs.StringVar(&c.disk, "disk", "", "writable disk of the whole session, e.g. 1G (default 64M)")
	fs.IntVar(&c.pids, "pids", 0, "process/thread limit of the whole session (default 128)")
	fs.DurationVar(&c.idle, "idle-timeout", 0, "end the session once idle this long (default 10m)")
	fs.DurationVar(&c.lifetime, "max-lifetime", 0, "end the session this long after its creation (default 1h; at most 24h)")
	fs.BoolVar(&c.jsonOut, "json", false, "print the session as JSON instead of its id")
	cl, code := sc.start(fs, args, func(n int) bool { return n == 0 })
	if cl == nil {
		return code
	}
	req, err := c.request()
	if err != nil {
		return sc.fail(err)
	}
	s, err := cl.CreateSession(ctx, req)
	if err != nil {
		return sc.fail(err)
	}
	if c.jsonOut {
		printJSONTo(sc.stdout, s)
	} else {
		fmt.Fprintln(sc.stdout, s.ID)
	}
	return 0
}

func (c *sessionCreateCmd) request() (*client.SessionRequest, error) {
	req := &client.SessionRequest{Image: c.image, IdleTimeout: c.idle, MaxLifetime: c.lifetime,
		Limits: sandbox.Limits{Wall: c.wall, Pids: c.pids}}
	var err error
	if req.Policy.Trust, err = sandbox.ParseTrustClass(c.trust); err != nil {
		return nil, sandbox.Wrap(sandbox.BadInput, err, "--trust")
	}
	if c.prefer != "" {
		if req.Policy.Preference, err = sandbox.ParseStrength(c.prefer); err != nil {
			return nil, sandbox.Wrap(sandbox.BadInput, err, "--prefer")
		}
	}
	for _, f := range []struct {
		name, v string
		dst     *int64
	}{{"--memory", c.memory, &req.Limits.Memory}, {"--disk", c.disk, &req.Limits.Disk}} {
		if f.v == "" {
			continue
		}
		if *f.dst, err = parseSize(f.v); err != nil {
			return nil, sandbox.Wrap(sandbox.BadInput, err, "%s", f.name)
		}
	}
	return req, nil
}
