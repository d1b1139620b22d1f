package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/sandbox"
)

// PausedAnyTenant is row 98's positive control: a paused sandbox resumes
// for whoever asks, as if its record named no tenant.
const PausedAnyTenant battery.Weakness = "paused-any-tenant"

// pausedCanary is what tenant A leaves in the sandbox it pauses.
const pausedCanary = "WOVYR-CANARY-paused"

// pausedProbe is row 98 for gVisor: tenant A's session sandbox, with a
// canary in its workspace and in a background process's environment, is
// paused; tenant B asks to resume it, then A does. Secure: B is refused
// (ErrWrongTenant) with the saved sandbox untouched, and A resumes it
// with its canary — the refusal is the tenant's, not a broken resume.
func pausedProbe(b *Backend) battery.Probe {
	const tried = "tenant A pauses its session sandbox (a canary in its workspace and a background process's env); tenant B resumes it, then A"
	return battery.Probe{ID: 98, Weakness: PausedAnyTenant, Backends: []string{b.name}, Run: func(ctx context.Context, t battery.Target) battery.Observation {
		tb, ok := t.Backend.(*Backend)
		if !ok {
			return battery.Observation{Tried: tried, Observed: fmt.Sprintf("target is %T", t.Backend)}
		}
		observed, secure := tb.probePaused(ctx, t.Image)
		return battery.Observation{Tried: tried, Observed: observed, Secure: secure}
	}}
}

func (b *Backend) probePaused(ctx context.Context, image string) (string, bool) {
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
	s := sb.(*Sandbox)
	defer s.Destroy(context.WithoutCancel(ctx))
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
	defer b.Discard(context.WithoutCancel(ctx), p)
	dir := filepath.Join(snapshotsDir(b.cfg.StateDir), "paused", b.name, p.ID)
	before, _ := os.ReadDir(dir)
	theirs, err := b.Resume(ctx, p, "wovyr-battery-b")
	if err == nil {
		defer theirs.Destroy(context.WithoutCancel(ctx))
		got := "nothing"
		if ts := theirs.(*Sandbox); ts.Open(ctx, claim("wovyr-battery-b")) == nil {
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
	mine, err := b.Resume(ctx, p, "wovyr-battery-a")
	if err != nil {
		return "A could not resume its own paused sandbox: " + err.Error(), false
	}
	defer mine.Destroy(context.WithoutCancel(ctx))
	ms := mine.(*Sandbox)
	if err := ms.Open(ctx, claim("wovyr-battery-a")); err != nil {
		return "open A's resumed sandbox: " + err.Error(), false
	}
	res, err := ms.Exec(ctx, &sandbox.Exec{Argv: []string{"cat", "canary"}})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != pausedCanary {
		return fmt.Sprintf("A's resumed sandbox lost its canary: %v", err), false
	}
	return "B refused (another tenant's), the saved sandbox untouched; A resumed it with its canary", true
}
