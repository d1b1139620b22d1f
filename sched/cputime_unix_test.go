//go:build unix

package sched

import "syscall"

// cpuSeconds is the process's user+system CPU time. On a shared, noisy
// machine it measures work done where wall time measures contention.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
