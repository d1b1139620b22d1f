// Package cgroup places processes under memory, pids and CPU limits and
// accounts what they used, on cgroup v1 (the hybrid layout these machines
// have) or v2 (a unified hierarchy with those controllers enabled).
//
// A Group is also how wovyr finds every process a workload started — a
// double-forked daemon leaves the process group but never its cgroup — so
// Kill freezes the group, kills every member and waits until it is empty.
//
// All groups live under one prefix ("wovyr" by default) so that Reconcile can
// remove leftovers after a crash without touching anything else.
package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Root is where cgroup filesystems are mounted.
const Root = "/sys/fs/cgroup"

// Prefix is the top-level directory wovyr owns in every hierarchy.
const Prefix = "wovyr"

// v1Controllers are the v1 hierarchies a Group spans. freezer makes Kill
// race-free; cpuacct gives CPU usage.
var v1Controllers = []string{"memory", "pids", "cpu", "cpuacct", "freezer"}

// Limits for a group. A zero field leaves that resource unlimited by the
// group (callers always pass limits; see sandbox.Limits.WithDefaults).
type Limits struct {
	Memory    int64 // bytes
	Pids      int
	CPUMillis int64 // thousandths of a core, enforced as a CFS quota
}

// Stats is what a group consumed.
type Stats struct {
	PeakMemory int64
	CPU        time.Duration
	OOMKills   int // processes the kernel OOM-killed in this group
	PidsMax    int // times a fork failed at pids.max
	PeakPids   int // most tasks at once, where the kernel reports it
}

// Group is one cgroup, spanning the needed controllers.
type Group struct {
	rel  string   // path below Root[/controller], e.g. wovyr/acme/x1
	v2   bool     // unified hierarchy
	dirs []string // one per controller (v1) or the single v2 dir
}

// V2 reports whether this host uses the unified hierarchy for the
// controllers wovyr needs.
func V2() bool {
	b, err := os.ReadFile(filepath.Join(Root, "cgroup.controllers"))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return contains(f, "memory") && contains(f, "pids")
}

// New creates the group rel (e.g. "wovyr/acme/abc") and applies lim. rel must
// start with Prefix; on failure nothing is left behind.
func New(rel string, lim Limits) (*Group, error) {
	rel = filepath.Clean(rel)
	if rel != Prefix && !strings.HasPrefix(rel, Prefix+"/") || strings.Contains(rel, "..") {
		return nil, fmt.Errorf("cgroup: %q is not below %s/", rel, Prefix)
	}
	g := &Group{rel: rel, v2: V2()}
	if g.v2 {
		g.dirs = []string{filepath.Join(Root, rel)}
		if err := enableV2Controllers(rel); err != nil {
			return nil, err
		}
	} else {
		for _, c := range v1Controllers {
			g.dirs = append(g.dirs, filepath.Join(Root, c, rel))
		}
	}
	for _, d := range g.dirs {
		err := os.MkdirAll(d, 0o755)
		if errors.Is(err, os.ErrNotExist) {
			err = os.MkdirAll(d, 0o755) // a sibling's Destroy removed a parent meanwhile
		}
		if err != nil {
			g.remove()
			return nil, fmt.Errorf("cgroup: create: %w", err)
		}
	}
	if err := g.SetLimits(lim); err != nil {
		g.remove()
		return nil, err
	}
	return g, nil
}

// Path is the group's path below the hierarchy root, e.g. "wovyr/acme/x1".
func (g *Group) Path() string { return g.rel }

func (g *Group) ctrl(name string) string {
	if g.v2 {
		return g.dirs[0]
	}
	for i, c := range v1Controllers {
		if c == name {
			return g.dirs[i]
		}
	}
	panic("cgroup: unknown controller " + name)
}

// SetLimits applies lim; zero fields are left as they are.
func (g *Group) SetLimits(lim Limits) error {
	type setting struct{ ctrl, file, val string }
	var w []setting
	if g.v2 {
		if lim.Memory > 0 {
			w = append(w, setting{"memory", "memory.max", strconv.FormatInt(lim.Memory, 10)})
		}
		if lim.Pids > 0 {
			w = append(w, setting{"pids", "pids.max", strconv.Itoa(lim.Pids)})
		}
		if lim.CPUMillis > 0 {
			w = append(w, setting{"cpu", "cpu.max", fmt.Sprintf("%d 100000", lim.CPUMillis*100)})
		}
	} else {
		if lim.Memory > 0 {
			w = append(w, setting{"memory", "memory.limit_in_bytes", strconv.FormatInt(lim.Memory, 10)})
		}
		if lim.Pids > 0 {
			w = append(w, setting{"pids", "pids.max", strconv.Itoa(lim.Pids)})
		}
		if lim.CPUMillis > 0 {
			w = append(w, setting{"cpu", "cpu.cfs_period_us", "100000"},
				setting{"cpu", "cpu.cfs_quota_us", strconv.FormatInt(lim.CPUMillis*100, 10)})
		}
	}
	for _, x := range w {
		p := filepath.Join(g.ctrl(x.ctrl), x.file)
		if err := os.WriteFile(p, []byte(x.val), 0); err != nil {
			return fmt.Errorf("cgroup: write %s: %w", p, err)
		}
	}
	if g.v2 && lim.Memory > 0 {
		// No swap either, where the kernel accounts it.
		_ = os.WriteFile(filepath.Join(g.dirs[0], "memory.swap.max"), []byte("0"), 0)
	}
	return nil
}

// Add moves pid into every controller of the group.
func (g *Group) Add(pid int) error {
	s := strconv.Itoa(pid)
	for _, d := range g.dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(s), 0); err != nil {
			return fmt.Errorf("cgroup: add %d to %s: %w", pid, d, err)
		}
	}
	return nil
}

// Pids lists the processes in the group.
func (g *Group) Pids() ([]int, error) {
	dir := g.ctrl("pids")
	if !g.v2 {
		dir = g.ctrl("freezer")
	}
	return readPids(filepath.Join(dir, "cgroup.procs"))
}

// others is Pids without visitors: processes only some thread of which is
// in the group (see Visit) — wovyr itself, or another wovyr whose groups a
// reconcile removes. Kill never signals them and counts them as no member.
// On v1 a visitor is a process whose leader is alive but not in the
// group's tasks; a workload cannot move its leader out (the files are
// root's), and a leader that exited while its threads run is a zombie.
func (g *Group) others() ([]int, error) {
	pids, err := g.Pids()
	if err != nil || len(pids) == 0 {
		return pids, err
	}
	self := os.Getpid()
	var tasks []int
	if !g.v2 {
		tasks, _ = readPids(filepath.Join(g.ctrl("freezer"), "tasks"))
	}
	return slices.DeleteFunc(pids, func(p int) bool {
		return p == self || !g.v2 && !slices.Contains(tasks, p) && !zombie(p)
	}), nil
}

// zombie reports whether process p has exited and awaits its parent.
func zombie(p int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

func readPids(file string) ([]int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids, nil
}

// Stats reads the group's accounting: Usage plus the pids counters.
func (g *Group) Stats() Stats {
	s := g.Usage()
	dir := g.ctrl("pids")
	s.PidsMax = int(keyed(filepath.Join(dir, "pids.events"), "max"))
	s.PeakPids = int(readInt(filepath.Join(dir, "pids.peak")))
	return s
}

// Usage reads only what a finished run reports (peak memory, CPU, OOM
// kills): three files instead of Stats' six, on every invocation's path.
func (g *Group) Usage() Stats {
	var s Stats
	if g.v2 {
		s.PeakMemory = readInt(filepath.Join(g.dirs[0], "memory.peak"))
		s.CPU = time.Duration(keyed(filepath.Join(g.dirs[0], "cpu.stat"), "usage_usec")) * time.Microsecond
		s.OOMKills = int(keyed(filepath.Join(g.dirs[0], "memory.events"), "oom_kill"))
		return s
	}
	s.PeakMemory = readInt(filepath.Join(g.ctrl("memory"), "memory.max_usage_in_bytes"))
	s.CPU = time.Duration(readInt(filepath.Join(g.ctrl("cpuacct"), "cpuacct.usage")))
	s.OOMKills = int(keyed(filepath.Join(g.ctrl("memory"), "memory.oom_control"), "oom_kill"))
	return s
}

// Kill freezes the group, SIGKILLs every member and waits (bounded by ctx)
// until it is empty. Freezing first means nothing can fork in between.
func (g *Group) Kill(ctx context.Context) error {
	if pids, err := g.others(); err == nil && len(pids) == 0 {
		return nil // the common case after a clean exit: nothing to freeze
	}
	freeze := filepath.Join(g.ctrl("freezer"), "freezer.state")
	frozen, thawed := "FROZEN", "THAWED"
	if g.v2 {
		freeze, frozen, thawed = filepath.Join(g.dirs[0], "cgroup.freeze"), "1", "0"
		// cgroup.kill kills atomically where the kernel has it.
		if err := os.WriteFile(filepath.Join(g.dirs[0], "cgroup.kill"), []byte("1"), 0); err == nil {
			return g.waitEmpty(ctx)
		}
	}
	_ = os.WriteFile(freeze, []byte(frozen), 0)
	for {
		pids, err := g.others()
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return fmt.Errorf("cgroup: list %s: %w", g.rel, err)
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		_ = os.WriteFile(freeze, []byte(thawed), 0) // a frozen task cannot die
		if len(pids) == 0 {
			return nil
		}
		if err := g.waitEmpty(ctx); err == nil {
			return nil
		} else if ctx.Err() != nil {
			return err
		}
		_ = os.WriteFile(freeze, []byte(frozen), 0)
	}
}

func (g *Group) waitEmpty(ctx context.Context) error {
	for delay := 100 * time.Microsecond; ; delay = min(2*delay, 20*time.Millisecond) {
		pids, err := g.others()
		if err != nil || len(pids) == 0 {
			return nil
		}
		if delay >= 20*time.Millisecond {
			// Still populated after the backoff ramp: let Kill re-freeze and retry.
			select {
			case <-ctx.Done():
				return fmt.Errorf("cgroup: %s still has %d processes: %w", g.rel, len(pids), ctx.Err())
			case <-time.After(delay):
				return errors.New("cgroup: not yet empty")
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cgroup: %s still has %d processes: %w", g.rel, len(pids), ctx.Err())
		case <-time.After(delay):
		}
	}
}

// Destroy kills every member and removes the group. It is idempotent.
func (g *Group) Destroy(ctx context.Context) error {
	if err := g.Kill(ctx); err != nil {
		return err
	}
	return g.remove()
}

func (g *Group) remove() error {
	var errs []error
	for _, d := range g.dirs {
		if err := rmdirRetry(d); err != nil {
			errs = append(errs, err)
			continue
		}
		// Drop now-empty parents (tenant dirs, the prefix); one that still
		// has children refuses with EBUSY, which ends the climb.
		for p, n := filepath.Dir(d), strings.Count(g.rel, "/"); n > 0; p, n = filepath.Dir(p), n-1 {
			if syscall.Rmdir(p) != nil {
				break
			}
		}
	}
	return errors.Join(errs...)
}

// rmdirRetry removes an empty cgroup dir; the kernel may report EBUSY for a
// moment after the last member is reaped.
func rmdirRetry(d string) error {
	var err error
	for i := 0; i < 50; i++ {
		err = syscall.Rmdir(d)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	return fmt.Errorf("cgroup: remove %s: %w", d, err)
}

func enableV2Controllers(rel string) error {
	// Every ancestor must delegate memory, pids and cpu to its children.
	parts := strings.Split(rel, "/")
	dir := Root
	for _, p := range parts {
		_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory +pids +cpu"), 0)
		dir = filepath.Join(dir, p)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("cgroup: create: %w", err)
		}
	}
	return nil
}

func readInt(file string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// keyed reads "key value" lines and returns key's value.
func keyed(file, key string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
