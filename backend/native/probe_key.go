package native

import (
	"context"
	"fmt"

	"github.com/wovyr/wovyr/cgroup"
	"github.com/wovyr/wovyr/probecache"
	"github.com/wovyr/wovyr/sandbox"
)

// ProbeKey implements sandbox.ProbeCacher. The probe runs /bin/true
// through this binary's own code (covered by every key), in the cgroup
// hierarchy it finds and the scratch directory it is given.
func (b *Backend) ProbeKey() string {
	return probecache.NewKey(b.Name()).
		Add(version, b.configHash(), b.scratch, cgroup.V2()).
		File("/bin/true").
		String()
}

// Adopt implements sandbox.ProbeCacher: the probe chooses nothing, so an
// answer of this configuration is adopted as it is.
func (b *Backend) Adopt(_ context.Context, capa sandbox.Capability) error {
	if capa.ConfigHash != b.configHash() {
		return fmt.Errorf("native: stored probe is for config %s, this is %s", capa.ConfigHash, b.configHash())
	}
	return nil
}
