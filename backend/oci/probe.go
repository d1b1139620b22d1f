package oci

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/wovyr/wovyr/cgroup"
	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/sandbox"
)

// runscPlatforms are tried in order. kvm is never probed: on these hosts it
// spins instead of failing (DESIGN §5); Config.Platform can force it.
var runscPlatforms = []string{"systrap", "ptrace"}

// runscFlags are the global flags every runsc call gets. --network=none but
// for the sandboxes of an allowlist (driver.netstack, egress.go); --oci-seccomp so the spec's profile
// applies inside the Sentry too; --overlay2=none so writes reach the
// size-limited upper layer (and collect) instead of Sentry memory.
func runscFlags(platform string) []string {
	return []string{"--platform=" + platform, "--network=none", "--oci-seccomp", "--overlay2=none"}
}

// Probe implements sandbox.Backend. It runs a real, trivial container — the
// agent in an empty root, answering one request — on each candidate runtime
// (and runsc platform) until one works, bounded by Config.ProbeTimeout, and
// says why each candidate failed otherwise. The first success is kept.
func (b *Backend) Probe(ctx context.Context) sandbox.Capability {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.ProbeTimeout)
	defer cancel()
	var why []string
	for _, d := range b.candidates(ctx, &why) {
		if err := b.trivial(ctx, d); err != nil {
			label := d.name
			if d.accel != "" {
				label += " (" + d.accel + ")"
			}
			why = append(why, fmt.Sprintf("%s: %v", label, err))
			continue
		}
		b.mu.Lock()
		b.driver = d
		b.mu.Unlock()
		feats := []string{"userns", "seccomp", "no-caps", "warm-agent"}
		if cgroup.V2() {
			feats = append(feats, "cgroup-v2")
		} else {
			feats = append(feats, "cgroup-v1")
		}
		if d.hybrid {
			feats = append(feats, "crun-hybrid-workaround")
		}
		egress := b.egressOn()
		if b.egressOn() {
			feats = append(feats, "egress-slot")
		}
		if b.gvisor && b.cfg.Network != nil {
			// Allowlists need netstack in a slot to work here, not just runsc.
			if err := b.trivialNetstack(ctx, d); err != nil {
				b.cfg.Logger.Warn("gvisor: netstack in an egress slot failed; allowlists refused", "err", err)
				feats = append(feats, "egress-netstack-failed")
			} else {
				egress = true
				feats = append(feats, "egress-netstack")
			}
		}
		if d.restoreCheck {
			feats = append(feats, restoreCheckFeature)
		}
		hash := b.configHash(d)
		b.afterProbe(d, hash)
		return sandbox.Capability{Available: true, Version: d.version, ConfigHash: hash,
			Accel: d.accel, Features: feats, Egress: egress}
	}
	if len(why) == 0 {
		why = []string{"no runtime candidates"}
	}
	return sandbox.Capability{Reason: strings.Join(why, "; ")}
}

func (b *Backend) candidates(ctx context.Context, why *[]string) []*driver {
	var out []*driver
	for _, n := range b.runtimeNames() {
		kind := filepath.Base(n)
		d, err := newDriver(ctx, kind, n, b.cfg.StateDir)
		if err != nil {
			*why = append(*why, err.Error())
			continue
		}
		out = append(out, b.platforms(d)...)
	}
	return out
}

// runtimeNames are the runtime binaries the probe tries, in order.
func (b *Backend) runtimeNames() []string {
	switch {
	case b.cfg.Runtime != "":
		return []string{b.cfg.Runtime}
	case b.gvisor:
		return []string{"runsc"}
	default:
		return []string{"crun", "runc"}
	}
}

// platforms is d once per runsc platform to try, or d itself for crun and
// runc.
func (b *Backend) platforms(d *driver) []*driver {
	if d.name != "runsc" {
		return []*driver{d}
	}
	plats := runscPlatforms
	if b.cfg.Platform != "" {
		plats = []string{b.cfg.Platform}
	}
	var out []*driver
	for _, p := range plats {
		dp := *d
		dp.accel, dp.flags = p, runscFlags(p)
		out = append(out, &dp)
	}
	return out
}

// trivialNetstack starts a gVisor sandbox as an allowlist gets one —
// netstack in a deny-all egress slot — checks its agent answers, and
// destroys it.
func (b *Backend) trivialNetstack(ctx context.Context, d *driver) error {
	empty := filepath.Join(b.run, "probe-root")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		return err
	}
	s, err := b.prepare(ctx, d, empty, "probe", sandbox.Limits{Memory: 64 << 20}.WithDefaults(), boot{netstack: true})
	if err != nil {
		return err
	}
	defer s.Destroy(context.WithoutCancel(ctx))
	if err := s.net.Apply(ctx, egress.Binding{Tenant: "wovyr-probe", Invocation: s.id}); err != nil {
		return err
	}
	return s.startAgent(ctx)
}

// trivial prepares a sandbox from an empty template on d, checks the agent
// answers (prepare's "ready" step), and destroys it.
func (b *Backend) trivial(ctx context.Context, d *driver) error {
	empty := filepath.Join(b.run, "probe-root")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		return err
	}
	s, err := b.prepare(ctx, d, empty, "probe", sandbox.Limits{Memory: 64 << 20}.WithDefaults(), boot{})
	if err != nil {
		return err
	}
	return s.Destroy(ctx)
}
