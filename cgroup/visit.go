package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Visit moves the calling OS thread — not its process — into and out of a
// group's v1 hierarchies, by writing "0" to their tasks files.
//
// # Why
//
// A child is born in its forking thread's cgroups, so a thread that visits
// the group before it forks spares the child a migration. Migrating another
// process takes the global cgroup_threadgroup_rwsem for writing (an RCU
// grace period when the lock was idle); a thread moving itself does not.
//
// Every method must run on the OS thread that called NewVisit, locked to
// its goroutine. v1 only: v2 moves whole processes (ErrThreadMove).
type Visit struct {
	g      *Group
	ctrl   map[string]*visitFiles
	joined []string
}

type visitFiles struct {
	in, home string   // tasks files: the group's, the thread's original
	homeF    *os.File // open where NewVisit was asked to
}

// ErrThreadMove reports a hierarchy that cannot move single threads.
var ErrThreadMove = errors.New("cgroup: v2 moves processes, not threads")

// NewVisit prepares the calling thread's visits to g: it records the
// thread's current group in every controller g spans, the one Leave
// returns to. Controllers in hot name those Leave moves out of through a
// file kept open, on a latency-critical path; other moves open per call.
func (g *Group) NewVisit(hot ...string) (*Visit, error) {
	if g.v2 {
		return nil, ErrThreadMove
	}
	home, err := threadGroups()
	if err != nil {
		return nil, err
	}
	v := &Visit{g: g, ctrl: map[string]*visitFiles{}}
	for i, c := range v1Controllers {
		rel, ok := home[c]
		if !ok {
			return nil, fmt.Errorf("cgroup: this thread is in no %s hierarchy", c)
		}
		f := &visitFiles{in: filepath.Join(g.dirs[i], "tasks"), home: filepath.Join(Root, c, rel, "tasks")}
		v.ctrl[c] = f
		if slices.Contains(hot, c) {
			if f.homeF, err = openRaw(f.home, os.O_WRONLY); err != nil {
				v.Close()
				return nil, err
			}
		}
	}
	return v, nil
}

// threadGroups maps each v1 controller to the calling thread's group path.
func threadGroups() (map[string]string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/self/task/%d/cgroup", syscall.Gettid()))
	if err != nil {
		return nil, fmt.Errorf("cgroup: own groups: %w", err)
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			m[c] = parts[2]
		}
	}
	return m, sc.Err()
}

// Enter moves the calling thread into the group's ctrls (all when none).
// On error it is back where it was.
func (v *Visit) Enter(ctrls ...string) error {
	if len(ctrls) == 0 {
		ctrls = v1Controllers
	}
	for _, c := range ctrls {
		if slices.Contains(v.joined, c) {
			continue
		}
		f := v.ctrl[c]
		if err := moveSelf(nil, f.in); err != nil {
			_ = v.Leave()
			return err
		}
		v.joined = append(v.joined, c)
	}
	return nil
}

// Leave moves the calling thread back to its own groups in ctrls (every
// one it is in when none). A group the thread is still in counts it in
// pids.current and lists its process in cgroup.procs.
func (v *Visit) Leave(ctrls ...string) error {
	if len(ctrls) == 0 {
		ctrls = slices.Clone(v.joined)
	}
	var errs []error
	for _, c := range ctrls {
		i := slices.Index(v.joined, c)
		if i < 0 {
			continue
		}
		f := v.ctrl[c]
		if err := moveSelf(f.homeF, f.home); err != nil {
			errs = append(errs, err)
			continue
		}
		v.joined = slices.Delete(v.joined, i, i+1)
	}
	return errors.Join(errs...)
}

// In reports whether the thread is in the group's controller c.
func (v *Visit) In(c string) bool { return slices.Contains(v.joined, c) }

// Close closes the open files; it does not move the thread.
func (v *Visit) Close() {
	for _, f := range v.ctrl {
		if f.homeF != nil {
			f.homeF.Close()
			f.homeF = nil
		}
	}
}

func moveSelf(f *os.File, path string) error {
	var err error
	if f != nil {
		_, err = f.Write([]byte("0"))
	} else {
		err = os.WriteFile(path, []byte("0"), 0)
	}
	if err != nil {
		return fmt.Errorf("cgroup: move thread to %s: %w", filepath.Dir(path), err)
	}
	return nil
}
