package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Reconcile kills every process left in groups below Prefix (in every
// hierarchy) and removes the groups, deepest first. It is what start-up runs
// after a crash; it touches nothing outside Prefix. It returns how many
// groups it removed.
func Reconcile(ctx context.Context) (int, error) { return ReconcileUnder(ctx, Prefix) }

// ReconcileUnder is Reconcile limited to the subtree rel (which must be
// Prefix or below it), for callers that own only part of the tree.
func ReconcileUnder(ctx context.Context, rel string) (int, error) {
	rel = filepath.Clean(rel)
	if rel != Prefix && !strings.HasPrefix(rel, Prefix+"/") || strings.Contains(rel, "..") {
		return 0, fmt.Errorf("cgroup: %q is not below %s/", rel, Prefix)
	}
	var tops []string
	if V2() {
		tops = []string{filepath.Join(Root, rel)}
	} else {
		// Every mounted hierarchy, not only the ones Group manages: OCI
		// runtimes create the same path in blkio, cpuset, devices, …
		tops, _ = filepath.Glob(filepath.Join(Root, "*", rel))
	}
	removed := 0
	var errs []error
	for _, top := range tops {
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.Reverse(dirs) // children before parents
		for _, d := range dirs {
			if pids, _ := readPids(filepath.Join(d, "cgroup.procs")); len(pids) > 0 {
				sub, _ := filepath.Rel(filepath.Dir(top), d)
				sub = filepath.Join(filepath.Dir(rel), sub)
				g := &Group{rel: sub, v2: V2()}
				if g.v2 {
					g.dirs = []string{d}
				} else {
					for _, c := range v1Controllers {
						g.dirs = append(g.dirs, filepath.Join(Root, c, sub))
					}
				}
				if err := g.Kill(ctx); err != nil {
					errs = append(errs, err)
				}
			}
			if err := rmdirRetry(d); err != nil {
				errs = append(errs, err)
			} else if d != top {
				removed++
			}
		}
	}
	return removed, errors.Join(errs...)
}

// Exists reports whether any hierarchy still holds rel.
func Exists(rel string) bool {
	if V2() {
		_, err := os.Stat(filepath.Join(Root, rel))
		return err == nil
	}
	for _, c := range v1Controllers {
		if _, err := os.Stat(filepath.Join(Root, c, rel)); err == nil {
			return true
		}
	}
	return false
}
