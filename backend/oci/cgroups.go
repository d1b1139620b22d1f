package oci

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The runtimes create the sandbox's own cgroups (linux.cgroupsPath) in every
// hierarchy they know; runsc leaks them when killed. These helpers find and
// remove one relative path in every mounted hierarchy, whichever created it.

// hierarchies lists the mount points of every cgroup (v1) and cgroup2 tree.
func hierarchies() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		_, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		fs := strings.Fields(post)
		if len(fs) > 0 && (fs[0] == "cgroup" || fs[0] == "cgroup2") {
			out = append(out, unescapeMount(strings.Fields(line)[4]))
		}
	}
	return out
}

// cgroupDirs returns rel's directory in every hierarchy where it exists.
func cgroupDirs(rel string) []string {
	var out []string
	for _, h := range hierarchies() {
		d := filepath.Join(h, rel)
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			out = append(out, d)
		}
	}
	return out
}

// cgroupProcs lists the processes in rel, across hierarchies.
func cgroupProcs(rel string) []int {
	seen := map[int]bool{}
	var out []int
	for _, d := range cgroupDirs(rel) {
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil && !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	return out
}

// removeCgroup kills every process in rel (in any hierarchy) and removes
// rel and its descendants everywhere, then rel's parent if it became empty
// (a tenant or pool directory). ctx bounds the wait for processes to die.
func removeCgroup(ctx context.Context, rel string) error {
	deadline := time.Now().Add(5 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	for {
		pids := cgroupProcs(rel)
		if len(pids) == 0 {
			break
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still has processes %v", rel, pids)
		}
		time.Sleep(2 * time.Millisecond)
	}
	var errs []error
	for _, d := range cgroupDirs(rel) {
		if err := rmdirTree(d, deadline); err != nil {
			errs = append(errs, err)
		}
	}
	// Then the tenant or pool dir and wovyr's top dir, in every hierarchy,
	// where they became empty (a dir still in use refuses with EBUSY).
	for parent := filepath.Dir(rel); parent == "wovyr" || strings.HasPrefix(parent, "wovyr/"); parent = filepath.Dir(parent) {
		for _, h := range hierarchies() {
			_ = syscall.Rmdir(filepath.Join(h, parent))
		}
	}
	return errors.Join(errs...)
}

// rmdirTree removes a cgroup directory and its child cgroups, deepest first;
// the kernel may answer EBUSY for a moment after the last task is reaped.
func rmdirTree(d string, deadline time.Time) error {
	ents, _ := os.ReadDir(d)
	for _, e := range ents {
		if e.IsDir() {
			if err := rmdirTree(filepath.Join(d, e.Name()), deadline); err != nil {
				return err
			}
		}
	}
	for {
		err := syscall.Rmdir(d)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", d, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
