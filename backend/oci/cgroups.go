package oci

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/cgroup"
	"github.com/wovyr/wovyr/hostlock"
)

// The runtimes create the sandbox's own cgroups (linux.cgroupsPath) in every
// hierarchy they know; runsc leaks them when killed. These helpers find and
// remove one relative path in every mounted hierarchy, whichever created it.

// cgroupParentsLock guards wovyr's shared cgroup parents (wovyr,
// wovyr/_pool, a tenant's dir) in every hierarchy, host-wide: an OCI
// runtime creates a sandbox's cgroup below them with a mkdir -p that fails
// (ENOENT) when a parent goes between its steps, so creators hold it shared
// (creatingCgroups) and a teardown removes the parents it emptied only if
// it gets it exclusively, without waiting; the last teardown, or
// Reconcile, removes them.
const cgroupParentsLock = "/run/wovyr/oci-cgroups.lock"

// creatingCgroups holds the cgroup parents for a runtime that is creating a
// sandbox's cgroup; release once that cgroup holds a process or creation
// failed.
func creatingCgroups() (release func(), err error) {
	if err := os.MkdirAll(filepath.Dir(cgroupParentsLock), 0o700); err != nil {
		return nil, err
	}
	f, err := hostlock.Wait(cgroupParentsLock, hostlock.Shared)
	if err != nil {
		return nil, err
	}
	return func() { f.Close() }, nil
}

// hierarchies lists the mount points of every cgroup (v1) and cgroup2 tree.
// They are read once: the host's cgroup mounts do not move under a running
// wovyr, and parsing mountinfo on every teardown poll costs more than the
// poll (the more so on a host with many mounts).
var hierarchies = sync.OnceValue(readHierarchies)

func readHierarchies() []string {
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

// treeProcs lists the processes in rel and its descendants, across
// hierarchies.
func treeProcs(rel string) []int {
	var out []int
	for _, d := range cgroupDirs(rel) {
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(f); err == nil {
					out = append(out, n)
				}
			}
			return nil
		})
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// removeCgroup kills every process in rel (in any hierarchy) and removes
// rel and its descendants everywhere, then rel's parent if it became empty
// (a tenant or pool directory). ctx bounds the wait for processes to die.
func removeCgroup(ctx context.Context, rel string) error {
	deadline := time.Now().Add(5 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	for pause := backoff(); !treeEmpty(rel); pause() {
		pids := treeProcs(rel)
		if len(pids) == 0 {
			break
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still has processes %v", rel, pids)
		}
	}
	var errs []error
	for _, d := range cgroupDirs(rel) {
		if err := rmdirTree(d, deadline); err != nil {
			errs = append(errs, err)
		}
	}
	// Then the tenant or pool dir and wovyr's top dir, in every hierarchy,
	// where they became empty (a dir still in use refuses with EBUSY), unless
	// a runtime is creating a sandbox's cgroup below them right now.
	if f, err := hostlock.Try(cgroupParentsLock, hostlock.Exclusive); err == nil && f != nil {
		defer f.Close()
		for parent := filepath.Dir(rel); parent == "wovyr" || strings.HasPrefix(parent, "wovyr/"); parent = filepath.Dir(parent) {
			for _, h := range hierarchies() {
				_ = syscall.Rmdir(filepath.Join(h, parent))
			}
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
	for pause := backoff(); ; pause() {
		err := syscall.Rmdir(d)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", d, err)
		}
	}
}

// backoff returns a pause for a teardown poll: 100 µs, doubling up to
// 2 ms. What it waits for (a killed task reaped, a css released) usually
// takes well under a millisecond, which a fixed 2 ms sleep would round up
// on every sandbox's Destroy.
func backoff() func() {
	d := 100 * time.Microsecond
	return func() {
		time.Sleep(d)
		d = min(2*d, 2*time.Millisecond)
	}
}

// treeEmpty reports whether rel and its descendants hold no task, from the
// pids controller's hierarchical count: one read where treeProcs reads
// cgroup.procs in every directory of every hierarchy. False when it cannot
// tell (no pids hierarchy, or rel not in it): the caller then looks.
func treeEmpty(rel string) bool {
	for _, h := range hierarchies() {
		b, err := os.ReadFile(filepath.Join(h, rel, "pids.current"))
		if err == nil {
			return strings.TrimSpace(string(b)) == "0"
		}
	}
	return false
}

// adopt opens the sandbox's own cgroup — the one the runtime made under
// the pool at Prepare — in the controllers wovyr limits and accounts with.
// A runtime that left a controller out gets the processes moved there now,
// at Prepare, so that claim never has to move a process.
func adopt(rel string) (*cgroup.Group, error) {
	g, err := cgroup.New(rel, cgroup.Limits{})
	if err != nil {
		return nil, err
	}
	pids := cgroupProcs(rel)
	for _, d := range g.Dirs() {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			return nil, err
		}
		in := strings.Fields(string(b))
		for _, p := range pids {
			if slices.Contains(in, strconv.Itoa(p)) {
				continue
			}
			if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(p)), 0); err != nil && !errors.Is(err, syscall.ESRCH) {
				return nil, fmt.Errorf("cgroup: add %d to %s: %w", p, d, err)
			}
		}
	}
	return g, nil
}

// setLimits writes lim into g. On v1 the memory+swap limit must never be
// below the memory limit, so it is written on both sides of it: the first
// write succeeds when raising, the second when lowering. No swap: past the
// limit a workload must die, not page.
func setLimits(g *cgroup.Group, lim cgroup.Limits) error {
	memsw := ""
	if !g.V2Group() && lim.Memory > 0 {
		memsw = filepath.Join(memoryDir(g), "memory.memsw.limit_in_bytes")
		_ = os.WriteFile(memsw, []byte(strconv.FormatInt(lim.Memory, 10)), 0)
	}
	if err := g.SetLimits(lim); err != nil {
		return err
	}
	if memsw != "" {
		_ = os.WriteFile(memsw, []byte(strconv.FormatInt(lim.Memory, 10)), 0)
	}
	return nil
}

// resetUsage restarts g's peak-memory high-water mark (v1; v2 has no reset)
// and returns its counters now, which usage subtracts.
func resetUsage(g *cgroup.Group) cgroup.Stats {
	if !g.V2Group() {
		_ = os.WriteFile(filepath.Join(memoryDir(g), "memory.max_usage_in_bytes"), []byte("0"), 0)
	}
	return g.Usage()
}

// usageSince is g's usage since base (resetUsage's answer).
func usageSince(g *cgroup.Group, base cgroup.Stats) cgroup.Stats {
	u := g.Usage()
	u.CPU -= base.CPU
	u.OOMKills -= base.OOMKills
	return u
}

func memoryDir(g *cgroup.Group) string {
	for _, d := range g.Dirs() {
		if filepath.Base(strings.TrimSuffix(d, "/"+g.Path())) == "memory" {
			return d
		}
	}
	return g.Dirs()[0]
}

// watchOOM counts the OOM events of the v1 memory cgroup dir and its
// descendants: cgroup.event_control signals an eventfd each time the
// kernel handles an OOM there. The kill itself is counted only in the
// victim's own cgroup (v1 does not propagate oom_kill), which the runtime
// may already have removed by the time the host looks (runsc does when its
// Sentry is killed), so the sandbox's cgroup keeps its own count.
func watchOOM(dir string) (int, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return -1, fmt.Errorf("oom eventfd: %w", err)
	}
	ofd, err := unix.Open(filepath.Join(dir, "memory.oom_control"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(efd)
		return -1, err
	}
	defer unix.Close(ofd)
	if err := os.WriteFile(filepath.Join(dir, "cgroup.event_control"), []byte(fmt.Sprintf("%d %d", efd, ofd)), 0); err != nil {
		unix.Close(efd)
		return -1, fmt.Errorf("oom notification: %w", err)
	}
	return efd, nil
}

// oomEvents reads (and resets) the count watchOOM's eventfd holds.
func oomEvents(efd int) int {
	var b [8]byte
	if efd < 0 {
		return 0
	}
	if n, err := unix.Read(efd, b[:]); err != nil || n != 8 {
		return 0
	}
	return int(binary.NativeEndian.Uint64(b[:]))
}
