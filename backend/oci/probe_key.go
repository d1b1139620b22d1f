package oci

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

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
	return k.Add(b.cfg.StateDir, b.cfg.Platform, b.cfg.UIDBase, b.cfg.Slots, b.cfg.Pooled, b.egressCapable(),
		filepath.Base(b.agent), filepath.Base(b.runner), b.weak, hybridCgroups(), cgroup.V2()).
		Command("unshare").
		String()
}

// Adopt implements sandbox.ProbeCacher: it takes, without running
// anything, the runtime the stored version names ("crun version 1.8.1")
// and the stored runsc platform. The stored configuration hash stands: the
// key covers everything it digests — the runtime's file (so the version is
// that file's), the agent and runner copies, the hybrid wrapper, the
// configuration and wovyr's own code, whose spec the hash is of —, and
// recomputing it (a spec built and JSON-encoded in a cold process) cost a
// one-shot command 1 ms.
func (b *Backend) Adopt(_ context.Context, capa sandbox.Capability) error {
	for _, n := range b.runtimeNames() {
		d, err := lookDriver(filepath.Base(n), n, b.cfg.StateDir)
		if err != nil || !strings.HasPrefix(capa.Version, d.name+" ") {
			continue
		}
		d.version = capa.Version
		d.restoreCheck = slices.Contains(capa.Features, restoreCheckFeature)
		for _, dp := range b.platforms(d) {
			if dp.accel == capa.Accel {
				b.mu.Lock()
				b.driver = dp
				b.mu.Unlock()
				return nil
			}
		}
	}
	return fmt.Errorf("%s: no runtime here matches the stored probe (%s, platform %q)", b.name, capa.Version, capa.Accel)
}
