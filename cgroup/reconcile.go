package cgroup

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// Reconcile kills every process left in groups below Prefix (in every
// hierarchy) and removes the groups, deepest first. It is what start-up runs
// after a crash; it touches nothing outside Prefix. It returns how many
// groups it removed.
func Reconcile(ctx context.Context) (int, error) {
	var tops []string
	if V2() {
		tops = []string{filepath.Join(Root, Prefix)}
	} else {
		for _, c := range v1Controllers {
			tops = append(tops, filepath.Join(Root, c, Prefix))
		}
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
				rel, _ := filepath.Rel(filepath.Dir(top), d)
				g := &Group{rel: rel, v2: V2()}
				if g.v2 {
					g.dirs = []string{d}
				} else {
					for _, c := range v1Controllers {
						g.dirs = append(g.dirs, filepath.Join(Root, c, rel))
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
