package oci

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/sandbox"
)

// pausedProbe is row 98 for gVisor (battery.TenantBoundSnapshot).
func pausedProbe(b *Backend) battery.Probe {
	return battery.Probe{ID: 98, Weakness: battery.PausedAnyTenant, Backends: []string{b.name}, Run: func(ctx context.Context, t battery.Target) battery.Observation {
		tb, ok := t.Backend.(*Backend)
		if !ok {
			return battery.Observation{Tried: battery.TenantBoundSnapshotTried, Observed: fmt.Sprintf("target is %T", t.Backend)}
		}
		observed, secure := tb.probePaused(ctx, t.Image)
		return battery.Observation{Tried: battery.TenantBoundSnapshotTried, Observed: observed, Secure: secure}
	}}
}

func (b *Backend) probePaused(ctx context.Context, image string) (string, bool) {
	return battery.TenantBoundSnapshot(ctx, b, image, func(p sandbox.Paused) string {
		return filepath.Join(snapshotsDir(b.cfg.StateDir), "paused", b.name, p.ID)
	})
}
