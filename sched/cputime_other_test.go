//go:build !unix

package sched

func cpuSeconds() float64 { return 0 }
