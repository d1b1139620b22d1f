package wasm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// openGuest opens /workspace/probe.txt up to stop times (or until failure) and
// prints opened= and errno=. With marker, it then closes one descriptor,
// creates /workspace/exhausted and spins (still holding the rest) until its
// deadline.
func openGuest(stop int, marker bool) string {
	g := newWat()
	g.code(`(block $done (loop $l
      (local.set $e (call $path_open (i32.const 3) (i32.const 0) %s (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 64)))
      (br_if $done (local.get $e))
      (local.set $last (i32.load (i32.const 64)))
      (local.set $n (i32.add (local.get $n) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $n) (i32.const %d)))))`, g.str("probe.txt"), stop)
	g.call("opened", "(local.get $n)")
	g.call("errno", "(local.get $e)")
	if marker {
		g.code(`(drop (call $fd_close (local.get $last)))
    (drop (call $path_open (i32.const 3) (i32.const 0) %s (i32.const %d) (i64.const %d) (i64.const 0) (i32.const 0) (i32.const 64)))
    (loop $spin (br $spin))`, g.str("exhausted"), oCreat, wasiWrite)
	}
	return strings.Replace(g.module(), `(func (export "_start")`, `(func (export "_start") (local $n i32) (local $e i32) (local $last i32)`, 1)
}

func countFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestDescriptorExhaustionSparesNeighbours: one invocation exhausts its
// descriptors and holds them; a concurrent neighbour still opens 200 files,
// and this process's descriptors do not move.
func TestDescriptorExhaustionSparesNeighbours(t *testing.T) {
	state := t.TempDir()
	b := newBackend(t, func(c *Config) { c.StateDir = state })
	const nofile = 64
	before := countFDs(t)

	hog := withWork(inv(mustWat(t, openGuest(1<<20, true)), "hog"))
	hog.Limits.NoFile, hog.Limits.Wall = nofile, 3*time.Second
	done := make(chan *sandbox.Result, 1)
	go func() { done <- run(t, b, hog) }()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if m, _ := filepath.Glob(filepath.Join(state, "wasm", "work", "wovyr-wasm-*", "exhausted")); len(m) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hog never exhausted its descriptors")
		}
	}
	if d := countFDs(t) - before; d > 16 {
		t.Errorf("this process holds %d more descriptors while a guest exhausts its own", d)
	}

	nb := run(t, b, withWork(inv(mustWat(t, openGuest(200, false)), "neighbour")))
	if m := guestLines(nb.Stdout); nb.Class != sandbox.OK || m["opened"] != "200" || m["errno"] != "0" {
		t.Fatalf("neighbour: class %q stdout %q %s", nb.Class, nb.Stdout, nb.Error)
	}
	res := <-done
	m := guestLines(res.Stdout)
	n, _ := strconv.Atoi(m["opened"])
	if res.Class != sandbox.Timeout || n > nofile || n < nofile-fdSlack || m["errno"] != strconv.Itoa(eIO) {
		t.Fatalf("hog: class %q stdout %q", res.Class, res.Stdout)
	}
}

// workerPIDs lists this process's worker children for state.
func workerPIDs(t testing.TB, state string) []int {
	t.Helper()
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range procs {
		env, err := os.ReadFile(filepath.Join(d, "environ"))
		if err != nil || !strings.Contains("\x00"+string(env), "\x00"+WorkerEnv+"="+state+"\x00") || ppid(d) != os.Getpid() {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		pids = append(pids, pid)
	}
	return pids
}

// TestWorkerKilledMidJob: a worker that dies fails its job with
// backend-failure; the next job gets a fresh worker; Close leaves none.
func TestWorkerKilledMidJob(t *testing.T) {
	state := t.TempDir()
	b, err := New(Config{StateDir: state, Worker: testWorker})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	spin := withWork(inv(mustWat(t, openGuest(1, true)), "spin"))
	errc := make(chan error, 1)
	go func() {
		sb, _ := b.Prepare(context.Background(), sandbox.Template{Kind: sandbox.KindWasm})
		_, err := sb.Run(context.Background(), spin)
		errc <- err
	}()
	var pids []int
	for deadline := time.Now().Add(20 * time.Second); len(pids) == 0; time.Sleep(5 * time.Millisecond) {
		if m, _ := filepath.Glob(filepath.Join(state, "wasm", "work", "wovyr-wasm-*", "exhausted")); len(m) > 0 {
			pids = workerPIDs(t, state)
		}
		if time.Now().After(deadline) {
			t.Fatal("no worker ran the job")
		}
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; sandbox.ClassOf(err) != sandbox.BackendFailure {
		t.Fatalf("job of a killed worker: %v", err)
	}
	res := run(t, b, withWork(inv(mustWat(t, openGuest(3, false)), "next")))
	if m := guestLines(res.Stdout); res.Class != sandbox.OK || m["opened"] != "3" {
		t.Fatalf("next job: %+v", res)
	}
	got := workerPIDs(t, state)
	if len(got) != 1 || got[0] == pids[0] {
		t.Fatalf("workers after replacement: %v (killed %d)", got, pids[0])
	}
	// An idle worker that died is skipped, not blamed on the next job.
	if err := syscall.Kill(got[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); len(workerPIDs(t, state)) > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("killed idle worker still running")
		}
	}
	res = run(t, b, withWork(inv(mustWat(t, openGuest(3, false)), "after-idle-death")))
	if m := guestLines(res.Stdout); res.Class != sandbox.OK || m["opened"] != "3" {
		t.Fatalf("job after an idle worker died: %+v", res)
	}
	b.Close()
	if got := workerPIDs(t, state); len(got) != 0 {
		t.Fatalf("workers left after Close: %v", got)
	}
}

// TestReconcileKillsOrphanWorkers: a process marked as a worker of this state
// dir whose parent is gone is killed; this process's own are not.
func TestReconcileKillsOrphanWorkers(t *testing.T) {
	state := t.TempDir()
	pidFile := filepath.Join(t.TempDir(), "pid")
	sh := exec.Command("/bin/sh", "-c", "sleep 60 & echo $! > "+pidFile)
	sh.Env = []string{WorkerEnv + "=" + state, "PATH=/usr/bin:/bin"}
	if err := sh.Run(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	// Wait until the orphan is sleep itself: halfway through its execve
	// /proc/<pid>/environ reads empty, and Reconcile would pass it by (seen
	// under load).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); strings.HasPrefix(string(cmd), "sleep\x00") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphan %d never became sleep", pid)
		}
	}
	n, err := Reconcile(context.Background(), state)
	if err != nil || n < 1 {
		t.Fatalf("reconcile: %d %v", n, err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
			break
		}
		if st, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); strings.Contains(string(st), ") Z ") {
			break // killed, awaiting its reaper
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphan worker %d still alive", pid)
		}
	}
}

// TestWorkerJobCancelled: cancelling a job in a worker ends it with class
// killed, as in-process, and its worker is not kept.
func TestWorkerJobCancelled(t *testing.T) {
	state := t.TempDir()
	b := newBackend(t, func(c *Config) { c.StateDir = state })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *sandbox.Result, 1)
	go func() {
		sb, _ := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindWasm})
		res, err := sb.Run(ctx, withWork(inv(mustWat(t, openGuest(1, true)), "spin")))
		if err != nil {
			res = &sandbox.Result{Error: err.Error()}
		}
		done <- res
	}()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if m, _ := filepath.Glob(filepath.Join(state, "wasm", "work", "wovyr-wasm-*", "exhausted")); len(m) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the guest never started")
		}
	}
	cancel()
	if res := <-done; res.Class != sandbox.Killed {
		t.Fatalf("cancelled job: %+v", res)
	}
	if got := workerPIDs(t, state); len(got) != 0 {
		t.Fatalf("the cancelled job's worker survived: %v", got)
	}
}
