package oci

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// A pooled gVisor sandbox (Config.Pooled) lives on one host CPU. Its Sentry and the systrap stub
// processes that run the workload hand every syscall and fault back and
// forth; on one CPU that is a plain context switch, spread over two it is a
// cross-CPU wake-up, and after the sandbox has sat idle in a pool those
// wake-ups land on halted (virtual) CPUs. Measured on this project's
// 2-vCPU nodes, the first exec of a claimed, idle sandbox took 21–29 ms
// spread over both CPUs and 13–18 ms on one (docs/BENCHMARKS.md). The CPU
// must be chosen before the Sentry starts (it sizes its Go runtime from the
// affinity it is born with: pinning a running Sentry made no difference), so
// the runtime is started with a one-CPU affinity that every process of the
// sandbox inherits. A claim that asks for more than one core gets all the
// backend's CPUs back (widen). One-shot sandboxes are not pinned: the
// Sentry boots faster on every CPU (cold Prepare+Run+Destroy 259 ms free
// vs 293–345 ms pinned, side by side), and a fresh sandbox's exec does not
// suffer from idleness.
//
// runc/crun sandboxes are not pinned: their workload is plain host
// processes, and their warm exec is already a fraction of gVisor's.

// cpuPlacer spreads pinned sandboxes over the CPUs wovyr may use: each goes
// to the CPU with the fewest live sandboxes (ties: the lowest number).
type cpuPlacer struct {
	cpus []int // wovyr's own affinity when the backend was made

	mu   sync.Mutex
	live map[int]int
}

func newCPUPlacer() (*cpuPlacer, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("cpu affinity: %w", err)
	}
	p := &cpuPlacer{cpus: cpuList(set), live: map[int]int{}}
	if len(p.cpus) == 0 {
		return nil, fmt.Errorf("cpu affinity: empty")
	}
	return p, nil
}

// acquire picks a CPU for a new sandbox; release gives it back.
func (p *cpuPlacer) acquire() (cpu int, release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cpu = p.cpus[0]
	for _, c := range p.cpus[1:] {
		if p.live[c] < p.live[cpu] {
			cpu = c
		}
	}
	p.live[cpu]++
	var once sync.Once
	return cpu, func() {
		once.Do(func() {
			p.mu.Lock()
			p.live[cpu]--
			p.mu.Unlock()
		})
	}
}

// all is the set of every CPU the placer spreads over.
func (p *cpuPlacer) all() unix.CPUSet {
	var set unix.CPUSet
	for _, c := range p.cpus {
		set.Set(c)
	}
	return set
}

// startOnCPU starts cmd with its affinity set to cpu alone. The affinity is
// set on a locked OS thread that forks the child and then exits with its
// goroutine (never unlocked), so no other goroutine ever runs pinned. The
// runtime cannot end the main thread, which a locked goroutine may be on
// (it parks it instead, and /proc shows the main thread's affinity as the
// process's), so the thread's affinity is put back too.
func startOnCPU(cmd *exec.Cmd, cpu int) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		var old, set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &old); err != nil {
			errc <- fmt.Errorf("cpu affinity: %w", err)
			return
		}
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			errc <- fmt.Errorf("pin to cpu %d: %w", cpu, err)
			return
		}
		err := cmd.Start()
		_ = unix.SchedSetaffinity(0, &old)
		errc <- err
	}()
	return <-errc
}

// setAffinity gives every thread of every process in pids the CPUs in set.
// Processes and threads that exit meanwhile are skipped; one born meanwhile
// inherits its parent's affinity, so a second pass (the caller's) finds any
// that were forked from a thread not yet visited.
func setAffinity(pids []int, set unix.CPUSet) (changed int, err error) {
	for _, pid := range pids {
		tasks, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
		if err != nil {
			continue // gone
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			var cur unix.CPUSet
			if unix.SchedGetaffinity(tid, &cur) != nil || cur == set {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
				return changed, fmt.Errorf("affinity of task %d: %w", tid, err)
			}
			changed++
		}
	}
	return changed, nil
}

// cpuList is the CPUs in set, ascending.
func cpuList(set unix.CPUSet) []int {
	var l []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			l = append(l, c)
		}
	}
	return slices.Clip(l)
}
