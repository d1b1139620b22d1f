package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/wovyr/wovyr/cgroup"
	"github.com/wovyr/wovyr/hostlock"
)

// Reconcile removes what this package left behind under stateDir after a
// crash or a failed teardown: containers of every runtime, their cgroups
// (in every hierarchy; runsc leaks them when killed), mounts and scratch
// directories. It touches only sandboxes whose owner is gone — a sandbox's
// lock is held by its live owner (locks.go) — and only names it creates
// ("wovyr-c-…", "wovyr-g-…" below <stateDir>/run/oci and /wovyr). It
// returns how many sandboxes it cleaned.
func Reconcile(ctx context.Context, stateDir string) (int, error) {
	run := runDir(stateDir)
	if _, err := os.Stat(run); errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	// Exclusive against Prepare's scratch creation (see makeScratch).
	g, err := hostlock.Wait(filepath.Join(run, "reconcile.lock"), hostlock.Exclusive)
	if err != nil {
		return 0, err
	}
	defer g.Close()
	_ = os.RemoveAll(filepath.Join(run, sharedShmDir)) // a positive control's

	stale := map[string]bool{}
	live := func(id string) bool {
		if stale[id] {
			return false
		}
		f, err := hostlock.Try(filepath.Join(run, "sb", id, "lock"), hostlock.Exclusive)
		if err != nil || f == nil {
			return err == nil // held by a live owner (or unreadable: leave it)
		}
		f.Close()
		stale[id] = true
		return false
	}
	// A lock file only exists in a scratch dir; an id without one is stale.
	ents, _ := os.ReadDir(filepath.Join(run, "sb"))
	var errs []error

	// 1. Containers in each runtime's root.
	for _, name := range []string{"crun", "runc", "runsc"} {
		d := &driver{name: name, path: name, root: filepath.Join(run, "state", name)}
		if name == "runsc" {
			d.flags = []string{"--network=none"}
		}
		if p, err := exec.LookPath(name); err == nil {
			d.path = p
		} else {
			continue
		}
		ids, err := d.list(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, id := range ids {
			if !ours(id) || live(id) {
				continue
			}
			if err := d.destroy(ctx, id); err != nil {
				errs = append(errs, err)
			}
			stale[id] = true
		}
	}
	// 2. Scratch directories: mounts first, then the tree.
	for _, e := range ents {
		id := e.Name()
		if !ours(id) || live(id) {
			continue
		}
		if err := removeScratch(filepath.Join(run, "sb", id)); err != nil {
			errs = append(errs, err)
		}
		stale[id] = true
	}
	// 3. Cgroups of sandboxes whose owner is gone, in every hierarchy. Only
	// this state directory's: a cgroup whose id has no scratch here (and
	// was not found stale above) belongs to another state directory — a
	// second daemon, a test run — whose live sandboxes must survive. What
	// no state directory claims any more is the daemon's host-wide cgroup
	// reconcile's ("all").
	for _, rel := range ociCgroups() {
		id := filepath.Base(rel)
		if _, err := os.Stat(filepath.Join(run, "sb", id)); err != nil && !stale[id] {
			continue
		}
		if !live(id) {
			if err := removeCgroup(ctx, rel); err != nil {
				errs = append(errs, err)
			}
			stale[id] = true
		}
	}
	// 4. Golden builds a dead process left (snapshot.go); stale goldens
	// go after the next probe, which knows the key.
	if err := reconcileSnapshots(stateDir, "gvisor", nil); err != nil {
		errs = append(errs, err)
	}
	n := 0
	for range stale {
		n++
	}
	return n, errors.Join(errs...)
}

// ours reports whether a container id or scratch name is this package's.
func ours(id string) bool {
	return (strings.HasPrefix(id, "wovyr-c-") || strings.HasPrefix(id, "wovyr-g-")) && !strings.ContainsAny(id, "/.")
}

// ociCgroups lists /wovyr/<group>/<id> paths with one of our ids as leaf, in
// any hierarchy (the pool and every tenant).
func ociCgroups() []string {
	seen := map[string]bool{}
	var out []string
	for _, h := range hierarchies() {
		groups, _ := os.ReadDir(filepath.Join(h, cgroup.Prefix))
		for _, g := range groups {
			if !g.IsDir() {
				continue
			}
			leaves, _ := os.ReadDir(filepath.Join(h, cgroup.Prefix, g.Name()))
			for _, l := range leaves {
				rel := fmt.Sprintf("%s/%s/%s", cgroup.Prefix, g.Name(), l.Name())
				if l.IsDir() && ours(l.Name()) && !seen[rel] {
					seen[rel] = true
					out = append(out, rel)
				}
			}
		}
	}
	return out
}

// Reconcile removes what crashed sandboxes of this backend's state
// directory left; the daemon calls it at start-up. Both OCI backends share
// the state, so either one's Reconcile cleans both.
func (b *Backend) Reconcile(ctx context.Context) (int, error) { return Reconcile(ctx, b.cfg.StateDir) }
