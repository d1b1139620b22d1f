package battery

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// pausedCanary is what tenant A leaves in the sandbox it pauses.
const pausedCanary = "WOVYR-CANARY-paused"

// TenantBoundSnapshotTried is what row 98 tries (TenantBoundSnapshot).
const TenantBoundSnapshotTried = "tenant A pauses its session sandbox (a canary in its workspace and a background process's env); tenant B resumes it, then A"

// pausable is a session sandbox that keeps background processes and
// pauses whole.
type pausable interface {
	sandbox.Session
	sandbox.Processes
	sandbox.Pauser
}

// TenantBoundSnapshot is row 98 on backend b, whose session sandboxes
// pause whole (sandbox.Pauser, sandbox.Resumer): tenant A's session
// sandbox, with a canary in its workspace and in a background process's
// environment, is paused; tenant B asks to resume it, then A does. Secure:
// B is refused (sandbox.ErrWrongTenant) with the saved sandbox, whose
// directory saved names, untouched, and A resumes it with its canary — the
// refusal is the tenant's, not a broken resume.
func TenantBoundSnapshot(ctx context.Context, b sandbox.Backend, image string, saved func(sandbox.Paused) string) (string, bool) {
	rs, ok := b.(sandbox.Resumer)
	if !ok {
		return fmt.Sprintf("backend %s does not resume paused sandboxes", b.Name()), false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	claim := func(tenant string) *sandbox.Claim {
		return &sandbox.Claim{ID: "battery-98", Tenant: tenant, Image: image, Policy: sandbox.Policy{Trust: sandbox.Untrusted},
			Limits: sandbox.Limits{Wall: time.Minute}}
	}
	sb, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand, Image: image})
	if err != nil {
		return "prepare: " + err.Error(), false
	}
	defer sb.Destroy(context.WithoutCancel(ctx))
	s, ok := sb.(pausable)
	if !ok {
		return fmt.Sprintf("a %s sandbox (%T) cannot hold a session that pauses", b.Name(), sb), false
	}
	if err := s.Open(ctx, claim("wovyr-battery-a")); err != nil {
		return "open for A: " + err.Error(), false
	}
	if _, err := s.Exec(ctx, &sandbox.Exec{Argv: []string{"/bin/sh", "-c", "echo " + pausedCanary + " > canary"}}); err != nil {
		return "A's canary: " + err.Error(), false
	}
	if _, err := s.Start(ctx, &sandbox.Exec{ID: "keeper", Argv: []string{"sleep", "600"}, Env: []string{"C=" + pausedCanary}, Background: true}); err != nil {
		return "A's background process: " + err.Error(), false
	}
	p, err := s.Pause(ctx, "wovyr-battery-a")
	if err != nil {
		return "pause for A: " + err.Error(), false
	}
	defer rs.Discard(context.WithoutCancel(ctx), p)
	dir := saved(p)
	before, _ := os.ReadDir(dir)
	theirs, err := rs.Resume(ctx, p, "wovyr-battery-b")
	if err == nil {
		defer theirs.Destroy(context.WithoutCancel(ctx))
		got := "nothing"
		if ts, ok := theirs.(sandbox.Session); ok && ts.Open(ctx, claim("wovyr-battery-b")) == nil {
			if res, err := ts.Exec(ctx, &sandbox.Exec{Argv: []string{"cat", "canary"}}); err == nil && strings.Contains(string(res.Stdout), pausedCanary) {
				got = "A's canary"
			}
		}
		return "tenant B resumed A's paused sandbox and read " + got, false
	}
	if !errors.Is(err, sandbox.ErrWrongTenant) {
		return "B's resume failed, but not as another tenant's: " + err.Error(), false
	}
	if after, _ := os.ReadDir(dir); len(after) != len(before) || len(before) == 0 {
		return fmt.Sprintf("B's refused resume changed the saved sandbox (%d files, then %d)", len(before), len(after)), false
	}
	mine, err := rs.Resume(ctx, p, "wovyr-battery-a")
	if err != nil {
		return "A could not resume its own paused sandbox: " + err.Error(), false
	}
	defer mine.Destroy(context.WithoutCancel(ctx))
	ms, ok := mine.(sandbox.Session)
	if !ok {
		return fmt.Sprintf("A's resumed sandbox (%T) holds no session", mine), false
	}
	if err := ms.Open(ctx, claim("wovyr-battery-a")); err != nil {
		return "open A's resumed sandbox: " + err.Error(), false
	}
	res, err := ms.Exec(ctx, &sandbox.Exec{Argv: []string{"cat", "canary"}})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != pausedCanary {
		return fmt.Sprintf("A's resumed sandbox lost its canary: %v", err), false
	}
	return "B refused (another tenant's), the saved sandbox untouched; A resumed it with its canary", true
}
