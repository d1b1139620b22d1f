package vmm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CgroupParent is the cgroup directory (under each controller on cgroup v1,
// under the unified root on v2) that holds one child per VMM process. The
// name carries "wovyr" so reconcile finds it and nothing else.
const CgroupParent = "wovyr-microvm"

const cgroupRoot = "/sys/fs/cgroup"

// A minimal cgroup layer, private to the VMM supervisor: create, limit,
// attach, kill, remove. It handles v1 (each controller its own hierarchy,
// as on these nodes) and a unified v2 tree.
type cgroup struct {
	dirs []string // one per hierarchy
}

func unified() bool {
	_, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers"))
	return err == nil
}

func newCgroup(id string, l Limits) (*cgroup, error) {
	cg := &cgroup{}
	if unified() {
		parent := filepath.Join(cgroupRoot, CgroupParent)
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return nil, err
		}
		_ = os.WriteFile(filepath.Join(cgroupRoot, "cgroup.subtree_control"), []byte("+memory +pids +cpu"), 0)
		_ = os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory +pids +cpu"), 0)
		dir := filepath.Join(parent, id)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, fmt.Errorf("vmm: cgroup: %w", err)
		}
		cg.dirs = []string{dir}
		writes := map[string]string{}
		if l.Memory > 0 {
			writes["memory.max"] = strconv.FormatInt(l.Memory, 10)
			writes["memory.swap.max"] = "0"
		}
		if l.Pids > 0 {
			writes["pids.max"] = strconv.Itoa(l.Pids)
		}
		if l.CPUs > 0 {
			writes["cpu.max"] = fmt.Sprintf("%d 100000", int64(l.CPUs*100000))
		}
		return cg, cg.write(dir, writes)
	}
	for _, ctl := range []string{"memory", "pids", "cpu"} {
		dir := filepath.Join(cgroupRoot, ctl, CgroupParent, id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			cg.remove()
			return nil, fmt.Errorf("vmm: cgroup %s: %w", ctl, err)
		}
		cg.dirs = append(cg.dirs, dir)
		writes := map[string]string{}
		switch {
		case ctl == "memory" && l.Memory > 0:
			writes["memory.limit_in_bytes"] = strconv.FormatInt(l.Memory, 10)
		case ctl == "pids" && l.Pids > 0:
			writes["pids.max"] = strconv.Itoa(l.Pids)
		case ctl == "cpu" && l.CPUs > 0:
			writes["cpu.cfs_period_us"] = "100000"
			writes["cpu.cfs_quota_us"] = strconv.FormatInt(int64(l.CPUs*100000), 10)
		}
		if err := cg.write(dir, writes); err != nil {
			cg.remove()
			return nil, err
		}
	}
	return cg, nil
}

func (cg *cgroup) write(dir string, kv map[string]string) error {
	for k, v := range kv {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0); err != nil {
			return fmt.Errorf("vmm: cgroup %s: %w", filepath.Join(dir, k), err)
		}
	}
	return nil
}

func (cg *cgroup) attach(pid int) error {
	for _, d := range cg.dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("vmm: attach %d to %s: %w", pid, d, err)
		}
	}
	return nil
}

// procs lists the pids in any of the group's hierarchies.
func (cg *cgroup) procs() []int {
	seen := map[int]bool{}
	var out []int
	for _, d := range cg.dirs {
		for _, p := range readPids(filepath.Join(d, "cgroup.procs")) {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// memoryPeak reads the hierarchy's peak memory, 0 if unknown.
func (cg *cgroup) memoryPeak() int64 {
	for _, d := range cg.dirs {
		for _, f := range []string{"memory.max_usage_in_bytes", "memory.peak"} {
			if b, err := os.ReadFile(filepath.Join(d, f)); err == nil {
				n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
				return n
			}
		}
	}
	return 0
}

// killAll SIGKILLs everything in the group until it is empty.
func (cg *cgroup) killAll(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		ps := cg.procs()
		if len(ps) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("vmm: processes %v survive in the VMM cgroup", ps)
		}
		for _, p := range ps {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (cg *cgroup) remove() error {
	var errs []error
	for _, d := range cg.dirs {
		if err := rmdirRetry(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// rmdirRetry removes a cgroup directory; the kernel may need a moment after
// the last task exits.
func rmdirRetry(d string) error {
	var err error
	for range 100 {
		err = syscall.Rmdir(d)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("vmm: remove cgroup %s: %w", d, err)
}

func readPids(file string) []int {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// RemoveCgroup kills every process left in the VMM cgroup called name
// (e.g. "wovyr-vm-<id>": a VM of a crashed wovyr) and removes it, in every
// hierarchy. A cgroup that does not exist is not an error.
func RemoveCgroup(name string) error {
	if !strings.HasPrefix(name, "wovyr-") || strings.ContainsAny(name, "/.") {
		return fmt.Errorf("vmm: %q is not a wovyr VM cgroup", name)
	}
	var dirs []string
	if unified() {
		dirs = []string{filepath.Join(cgroupRoot, CgroupParent, name)}
	} else {
		for _, ctl := range []string{"memory", "pids", "cpu"} {
			dirs = append(dirs, filepath.Join(cgroupRoot, ctl, CgroupParent, name))
		}
	}
	cg := &cgroup{}
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			cg.dirs = append(cg.dirs, d)
		}
	}
	if len(cg.dirs) == 0 {
		return nil
	}
	if err := cg.killAll(5 * time.Second); err != nil {
		return err
	}
	return cg.remove()
}
