package battery

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/wovyr/wovyr/battery/prober"
	"github.com/wovyr/wovyr/sandbox"
)

// guestRun is one prober run and what came back.
type guestRun struct {
	res *sandbox.Result
	rep prober.Report
	err error // could not run, or printed no report
}

func (g guestRun) String() string {
	if g.res == nil {
		return fmt.Sprintf("no result: %v", g.err)
	}
	s := fmt.Sprintf("class=%q exit=%d", g.res.Class, g.res.ExitCode)
	if g.err == nil {
		s += fmt.Sprintf(" count=%d errno=%s", g.rep.Count, g.rep.Errno)
	} else {
		s += fmt.Sprintf(" (%v)", g.err)
	}
	return s
}

// probeInvocation is the invocation that runs the prober with args.
func probeInvocation(t Target, lim sandbox.Limits, args ...string) *sandbox.Invocation {
	if lim.Wall == 0 {
		lim.Wall = 30 * time.Second
	}
	return &sandbox.Invocation{
		ID:       sandbox.NewID(),
		Tenant:   "wovyr-battery",
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Image: t.Image, Argv: append(append([]string{}, t.Guest...), args...), Env: []string{"PATH=/usr/bin:/bin"}},
		Limits:   lim,
		Policy:   sandbox.Policy{Trust: sandbox.Trusted},
	}
}

// runIn runs the prober in an already prepared sandbox.
func runIn(ctx context.Context, sb sandbox.Sandbox, inv *sandbox.Invocation) guestRun {
	res, err := sb.Run(ctx, inv)
	g := guestRun{res: res, err: err}
	if err != nil {
		return g
	}
	lines := bytes.Split(bytes.TrimSpace(res.Stdout), []byte("\n"))
	last := lines[len(lines)-1]
	if err := json.Unmarshal(last, &g.rep); err != nil || g.rep.Probe == "" {
		g.err = fmt.Errorf("no probe report (stderr %q)", truncate(res.Stderr, 200))
	}
	return g
}

// runGuest prepares a fresh sandbox on t, runs the prober, destroys it.
func runGuest(ctx context.Context, t Target, lim sandbox.Limits, args ...string) guestRun {
	sb, err := t.Backend.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand, Image: t.Image})
	if err != nil {
		return guestRun{err: err}
	}
	defer sb.Destroy(context.WithoutCancel(ctx))
	return runIn(ctx, sb, probeInvocation(t, lim, args...))
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// marker returns a unique string for a probe's processes and canaries.
func marker(probe string) string { return "wovyr-mark-" + probe + "-" + sandbox.NewID()[:12] }
