package oci

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/wovyr/wovyr/cgroup"
	"github.com/wovyr/wovyr/probecache"
	"github.com/wovyr/wovyr/sandbox"
)

// ProbeKey implements sandbox.ProbeCacher. The probe's answer depends on
// which runtime binaries resolve and which files they are (so the version
// a probe read is that file's), the agent it starts (its copy is named by
// content), the wrapper crun needs on a hybrid host, the cgroup hierarchy
// and the configuration.
func (b *Backend) ProbeKey() string {
	k := probecache.NewKey(b.name)
	for _, n := range b.runtimeNames() {
		k.Command(n)
	}
	return k.Add(b.cfg.StateDir, b.cfg.Platform, b.cfg.UIDBase, b.cfg.Slots, b.cfg.Pooled, b.egressOn(),
		filepath.Base(b.agent), filepath.Base(b.runner), b.weak, hybridCgroups(), cgroup.V2()).
		Command("unshare").
		String()
}

// Adopt implements sandbox.ProbeCacher: it takes, without running
// anything, the runtime (and runsc platform) whose configuration hash with
// the stored version is the stored one. Which binary a name resolves to is
// in the key, so the stored version is that binary's.
func (b *Backend) Adopt(_ context.Context, capa sandbox.Capability) error {
	for _, n := range b.runtimeNames() {
		d, err := lookDriver(filepath.Base(n), n, b.cfg.StateDir)
		if err != nil {
			continue
		}
		d.version = capa.Version
		for _, dp := range b.platforms(d) {
			if dp.accel == capa.Accel && b.configHash(dp) == capa.ConfigHash {
				b.mu.Lock()
				b.driver = dp
				b.mu.Unlock()
				return nil
			}
		}
	}
	return fmt.Errorf("%s: no runtime here matches the stored probe (%s, config %s)", b.name, capa.Version, capa.ConfigHash)
}
