package vmm

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/wovyr/wovyr/cgroup"
)

// CgroupParent is the cgroup path (below each hierarchy's root) that holds
// one group per VMM process, inside the tree package cgroup owns.
const CgroupParent = cgroup.Prefix + "/microvm"

// CgroupPath is the cgroup of the VM named name ("wovyr-<id>").
func CgroupPath(name string) string { return CgroupParent + "/" + name }

// newCgroup creates the VMM's group with l applied.
func newCgroup(name string, l Limits) (*cgroup.Group, error) {
	g, err := cgroup.New(CgroupPath(name), cgroup.Limits{Memory: l.Memory, Pids: l.Pids, CPUMillis: int64(l.CPUs * 1000)})
	if err != nil {
		return nil, fmt.Errorf("vmm: %w", err)
	}
	return g, nil
}

// destroyCgroup kills whatever is left in g and removes it.
func destroyCgroup(g *cgroup.Group) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return g.Destroy(ctx)
}

// RemoveCgroup kills every process left in the VMM cgroup called name
// (e.g. "wovyr-vm-<id>": a VM of a crashed wovyr) and removes it. A cgroup
// that does not exist is not an error.
func RemoveCgroup(ctx context.Context, name string) error {
	if !strings.HasPrefix(name, "wovyr-") || strings.ContainsAny(name, "/.") {
		return fmt.Errorf("vmm: %q is not a wovyr VM cgroup", name)
	}
	if !cgroup.Exists(CgroupPath(name)) {
		return nil
	}
	_, err := cgroup.ReconcileUnder(ctx, CgroupPath(name))
	return err
}
