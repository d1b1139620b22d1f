package agent

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// procStat is what the sweep and a background kill need of one process in
// the agent's pid namespace, from /proc/PID/stat.
type procStat struct {
	pid, ppid, sid int
	state          byte
}

// zombie reports whether the process has exited and waits to be reaped.
func (p procStat) zombie() bool { return p.state == 'Z' || p.state == 'X' }

// scanProcs lists the processes in /proc. A process that ends during the
// scan is left out.
func scanProcs() ([]procStat, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("read /proc: %w", err)
	}
	var out []procStat
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		st, ok, err := readStat(pid)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, st)
		}
	}
	return out, nil
}

// readStat reads /proc/PID/stat; false: the process is gone.
func readStat(pid int) (procStat, bool, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false, nil // gone meanwhile
	}
	st, err := parseStat(b)
	if err != nil {
		return procStat{}, false, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	st.pid = pid
	return st, true, nil
}

// parseStat reads the state, ppid and session of a /proc/PID/stat line:
// "pid (comm) state ppid pgrp session …", where comm may hold spaces and
// parentheses (hence the last ')').
func parseStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("no comm in %q", b)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 4 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("short stat %q", b)
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	sid, err2 := strconv.Atoi(string(f[3]))
	if err1 != nil || err2 != nil {
		return procStat{}, fmt.Errorf("bad stat %q", b)
	}
	return procStat{state: f[0][0], ppid: ppid, sid: sid}, nil
}

// scanTree lists the processes descended from root, root left out, by
// their /proc/PID/task/TID/children lists. In a VM, whose kernel threads
// descend from kthreadd and never from init, the tree of init (root 1) is
// every user process — orphans are re-parented into it — without a read
// of each kernel thread's stat: a scan of /proc under TCG cost as long as
// the job it swept. A process that ends during the scan is left out; one
// born during it is the next round's (sweepSparing loops). It fails, and
// the caller scans /proc, where the kernel keeps no children lists
// (CONFIG_PROC_CHILDREN).
func scanTree(root int) ([]procStat, error) {
	var out []procStat
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		if err != nil {
			if pid == root {
				return nil, fmt.Errorf("read /proc/%d/task: %w", pid, err)
			}
			continue // gone meanwhile
		}
		for _, t := range tasks {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + t.Name() + "/children")
			if err != nil {
				if pid == root && os.IsNotExist(err) {
					return nil, fmt.Errorf("no children lists: %w", err)
				}
				continue
			}
			for _, f := range bytes.Fields(b) {
				child, err := strconv.Atoi(string(f))
				if err != nil {
					continue
				}
				p, ok, err := readStat(child)
				if err != nil {
					return nil, err
				}
				if ok {
					out = append(out, p)
					queue = append(queue, child)
				}
			}
		}
	}
	return out, nil
}
