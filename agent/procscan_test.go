package agent

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseStat(t *testing.T) {
	cases := []struct {
		line string
		want procStat
		bad  bool
	}{
		{line: "42 (sleep) S 1 42 42 0 -1 4194560 100", want: procStat{state: 'S', ppid: 1, sid: 42}},
		// A comm may hold spaces and parentheses; the last ')' ends it.
		{line: "7 (a) b) Z 3 5 9 0", want: procStat{state: 'Z', ppid: 3, sid: 9}},
		{line: "7 (x) S 3", bad: true},
		{line: "7 x S 3 4 5", bad: true},
		{line: "7 (x) S a 4 5", bad: true},
	}
	for _, c := range cases {
		got, err := parseStat([]byte(c.line))
		if c.bad != (err != nil) || !c.bad && got != c.want {
			t.Errorf("parseStat(%q) = %+v, %v", c.line, got, err)
		}
	}
}

// TestScanProcsSeesItself: this process is in /proc with its own session.
func TestScanProcsSeesItself(t *testing.T) {
	ps, err := scanProcs()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.pid == pid() {
			if p.sid != sid() || p.ppid != ppid() || p.zombie() {
				t.Fatalf("self: %+v, want sid %d ppid %d", p, sid(), ppid())
			}
			return
		}
	}
	t.Fatalf("pid %d not found among %d processes", pid(), len(ps))
}

func pid() int  { return os.Getpid() }
func ppid() int { return os.Getppid() }
func sid() int {
	s, err := unix.Getsid(0)
	if err != nil {
		panic(err)
	}
	return s
}

// TestScanTreeFindsEveryDescendant: with this process a subreaper, as a
// VM's init is every orphan's parent, scanTree finds its children, their
// children, and an orphan a child daemonised (setsid, its parent gone):
// the same processes a scan of /proc finds under it, and nothing else.
func TestScanTreeFindsEveryDescendant(t *testing.T) {
	runtime.LockOSThread() // the subreaper attribute is the thread's process's, set once
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("cannot be a subreaper: %v", err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	tag := fmt.Sprintf("3%d", time.Now().UnixNano()%1000000)
	cmd := exec.Command("/bin/sh", "-c", "sleep "+tag+" & sleep "+tag+" & (setsid sleep "+tag+" &) ; wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		orphans := descendantsByProc(t)
		for _, p := range orphans {
			syscall.Kill(p, syscall.SIGKILL)
		}
		cmd.Wait()
		for _, p := range orphans { // the orphan is this process's child now: reap it, and only it
			var ws syscall.WaitStatus
			syscall.Wait4(p, &ws, 0, nil)
		}
	}()
	var tree []procStat
	orphan := false
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var err error
		if tree, err = scanTree(pid()); err != nil {
			t.Skipf("no children lists here: %v", err)
		}
		orphan = false
		for _, p := range tree {
			orphan = orphan || p.ppid == pid() && p.sid == p.pid
		}
		// sh, its two sleeps, and the orphan (re-parented to this process,
		// and in its own session: setsid may run after the re-parenting)
		if len(tree) >= 4 && orphan || time.Now().After(deadline) {
			break
		}
	}
	got := map[int]bool{}
	for _, p := range tree {
		got[p.pid] = true
	}
	want := descendantsByProc(t)
	if len(got) != len(want) || !orphan {
		t.Fatalf("scanTree: %+v (orphan %v); /proc has %v", tree, orphan, want)
	}
	for _, p := range want {
		if !got[p] {
			t.Fatalf("scanTree missed %d: %+v", p, tree)
		}
	}
}

// descendantsByProc is the oracle: every process in /proc whose parent
// chain reaches this one.
func descendantsByProc(t *testing.T) []int {
	t.Helper()
	ps, err := scanProcs()
	if err != nil {
		t.Fatal(err)
	}
	parent := map[int]int{}
	for _, p := range ps {
		parent[p.pid] = p.ppid
	}
	var out []int
	for _, p := range ps {
		for q := parent[p.pid]; q > 1; q = parent[q] {
			if q == pid() {
				out = append(out, p.pid)
				break
			}
		}
	}
	return out
}
