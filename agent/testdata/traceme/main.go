// Command traceme is issue #25's reproducer: its leader thread makes its
// parent its tracer (ptrace(PTRACE_TRACEME)), sends itself SIGUSR1, prints
// a line once the signal arrives and exits 7 (prober.Traceme, battery row
// 94's workload). Without a tracer, or with one that detaches, that is what
// it does; a parent that takes the ptrace-stop for an exit loses the exit
// code and the output.
package main

import (
	"os"
	"runtime"

	"github.com/wovyr/wovyr/battery/prober"
)

// init locks the main goroutine to the main thread, so the traced thread
// is the leader (tid == pid) and the signal goes to it.
func init() { runtime.LockOSThread() }

func main() {
	prober.Traceme()
	os.Exit(prober.TracemeExit)
}
