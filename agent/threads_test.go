package agent

import (
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// threadsChild marks the fresh process TestReserveThreadsCoversBlockingCalls
// runs its check in.
const threadsChild = "WOVYR_TEST_THREADS_CHILD"

// TestReserveThreadsCoversBlockingCalls: after ReserveThreads, goroutines
// blocked in system calls — a job's poll loop, reaper and stdin writer, and
// more — are carried by the idle threads: the runtime starts none, so an
// agent whose job holds the whole process budget never needs clone. Without
// the reservation each blocked call costs a new thread.
//
// It runs in a fresh process of its own, as the agent does: in the test
// binary, goroutines other tests left blocked may hold the idle threads
// (seen once, a thread more under a loaded machine).
func TestReserveThreadsCoversBlockingCalls(t *testing.T) {
	if os.Getenv(threadsChild) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestReserveThreadsCoversBlockingCalls$", "-test.count=1")
		cmd.Env = append(os.Environ(), threadsChild+"=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return
	}
	ReserveThreads()
	before, err := threadCount()
	if err != nil {
		t.Fatal(err)
	}
	if before < idleThreads || before > ThreadReserve {
		t.Fatalf("%d threads after ReserveThreads, want %d..%d", before, idleThreads, ThreadReserve)
	}
	const blocked = 5
	var fds [blocked][2]int
	var wg sync.WaitGroup
	for i := range fds {
		if err := syscall.Pipe(fds[i][:]); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b [1]byte
			syscall.Read(fds[i][0], b[:]) // blocks in the kernel until written
		}()
	}
	time.Sleep(200 * time.Millisecond) // long past sysmon's 20 µs hand-off of their Ps
	during, err := threadCount()
	for i := range fds {
		syscall.Write(fds[i][1], []byte{1})
	}
	wg.Wait()
	for i := range fds {
		syscall.Close(fds[i][0])
		syscall.Close(fds[i][1])
	}
	if err != nil {
		t.Fatal(err)
	}
	if during != before {
		t.Fatalf("%d goroutines blocked in read(2) took the process from %d to %d threads; the reserve should carry them", blocked, before, during)
	}
}
