package agent

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
)

// A container's agent and its job run as the sandbox's one user, so every
// bound on processes counts the agent's own threads: RLIMIT_NPROC counts a
// user's tasks, threads included, and so does the pids cgroup. The Go
// runtime starts a thread whenever a goroutine blocks in a system call and
// no idle one is left. Two things follow, and this file handles both:
//
//   - the job's budget must not depend on how many threads the agent
//     happened to have started: SetRlimits adds the agent's count, taken
//     just before the job starts, to the job's RLIMIT_NPROC;
//   - the agent must not need a new thread while a job holds the whole
//     budget: clone fails with EAGAIN there, and the Go runtime's answer to
//     that is a fatal error, which would take the sandbox's init down
//     mid-job. ReserveThreads starts, at the agent's start, more threads
//     than a job ever keeps busy at once (the poll loop, the reaper, the
//     stdin writer, the running goroutines), and the runtime reuses idle
//     threads before it makes new ones. A thread that has just given up
//     its P but not yet parked is neither busy nor idle, so the reserve
//     holds twice what a job keeps busy: 8 fell one short once in 40 runs
//     under the race detector on a loaded machine; 16 never in 120.

// ThreadReserve bounds the agent's threads (ReserveThreads keeps it well
// under): what a sandbox adds to a workload's process budget for its agent,
// in the spec's RLIMIT_NPROC before the claim and in the pids cgroup.
const ThreadReserve = 32

const (
	agentProcs  = 2  // GOMAXPROCS: the agent moves bytes; it needs no parallelism
	idleThreads = 16 // started up front: twice what a job keeps busy (see above)
)

// ReserveThreads fixes the agent's thread pool before its first job:
// GOMAXPROCS stays small whatever the host's CPU count, and idleThreads
// threads are started and left idle for the runtime to reuse. Call it once,
// before Serve.
func ReserveThreads() {
	runtime.GOMAXPROCS(agentProcs)
	var locked, done sync.WaitGroup
	release := make(chan struct{})
	locked.Add(idleThreads)
	done.Add(idleThreads)
	for range idleThreads {
		go func() {
			defer done.Done()
			// A locked goroutine that blocks keeps its thread, so the
			// runtime must start another for everything else.
			runtime.LockOSThread()
			locked.Done()
			<-release
			runtime.UnlockOSThread() // the thread goes idle, not away
		}()
	}
	locked.Wait()
	close(release)
	done.Wait()
}

// threadCount is the calling process's number of threads.
func threadCount() (int, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("Threads:")); ok {
			return strconv.Atoi(string(bytes.TrimSpace(v)))
		}
	}
	return 0, fmt.Errorf("no Threads line in /proc/self/status")
}
