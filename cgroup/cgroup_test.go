package cgroup

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("cgroup tests need root (CI runs as root)")
	}
}

func testGroup(t *testing.T, lim Limits) *Group {
	t.Helper()
	rel := fmt.Sprintf("%s/test/%s-%d", Prefix, strings.ReplaceAll(t.Name(), "/", "_"), os.Getpid())
	g, err := New(rel, lim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Destroy(context.Background()); err != nil {
			t.Error(err)
		}
		if Exists(rel) {
			t.Errorf("%s survived Destroy", rel)
		}
	})
	return g
}

func start(t *testing.T, g *Group, script string) *exec.Cmd {
	t.Helper()
	return startWith(t, g.Add, script)
}

// startWith is start with the way the process joins its group.
func startWith(t *testing.T, add func(pid int) error, script string) *exec.Cmd {
	t.Helper()
	// The script waits for a line on stdin, so that it forks nothing
	// before it is in the group.
	cmd := exec.Command("/bin/sh", "-c", "read go; "+script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	in.Write([]byte("go\n"))
	in.Close()
	return cmd
}

func TestKillFindsDoubleForkedDaemon(t *testing.T) {
	requireRoot(t)
	g := testGroup(t, Limits{Pids: 32})
	cmd := start(t, g, "(setsid sleep 300 &) ; sleep 300")
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids, _ := g.Pids()
		if len(pids) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon never appeared: %v", pids)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := g.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if pids, _ := g.Pids(); len(pids) != 0 {
		t.Fatalf("survivors after Kill: %v", pids)
	}
}

func TestMemoryLimitCountsOOMKill(t *testing.T) {
	requireRoot(t)
	g := testGroup(t, Limits{Memory: 16 << 20, Pids: 16})
	// Allocate and touch 64 MiB through the shell's own memory.
	cmd := start(t, g, `x=$(head -c 67108864 /dev/zero | tr '\0' a); echo ${#x}`)
	err := cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if err == nil || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("hog was not killed: %v", err)
	}
	st := g.Stats()
	if st.OOMKills < 1 {
		t.Fatalf("OOMKills = %d, want ≥ 1 (stats %+v)", st.OOMKills, st)
	}
	if st.PeakMemory < 8<<20 || st.PeakMemory > 17<<20 {
		t.Fatalf("peak memory %d outside (8 MiB, 17 MiB]", st.PeakMemory)
	}
}

func TestPidsLimitHolds(t *testing.T) {
	requireRoot(t)
	g := testGroup(t, Limits{Pids: 8})
	cmd := start(t, g, `n=0; while [ $n -lt 40 ]; do sleep 5 & n=$((n+1)); done 2>/dev/null; wait`)
	time.Sleep(300 * time.Millisecond)
	pids, _ := g.Pids()
	if len(pids) > 8 {
		t.Fatalf("%d processes under pids.max=8", len(pids))
	}
	if g.Stats().PidsMax == 0 {
		t.Fatal("pids.events max = 0: no fork was refused")
	}
	_ = g.Kill(context.Background())
	_ = cmd.Wait()
}

func TestNewRefusesForeignPath(t *testing.T) {
	for _, rel := range []string{"system.slice/x", "wovyrx/a", "wovyr/../etc"} {
		if _, err := New(rel, Limits{}); err == nil {
			t.Errorf("New(%q) accepted a path outside %s/", rel, Prefix)
		}
	}
}

func TestReconcileRemovesLeftovers(t *testing.T) {
	requireRoot(t)
	// Only this test's subtree: other packages' tests may have live
	// sandboxes under the prefix right now.
	scope := fmt.Sprintf("%s/test-reconcile-%d", Prefix, os.Getpid())
	rel := scope + "/leftover"
	g, err := New(rel, Limits{Pids: 8})
	if err != nil {
		t.Fatal(err)
	}
	cmd := start(t, g, "sleep 300")
	// A neighbour outside the prefix must survive.
	other := filepath.Join(Root, "pids", "wovyr-not-ours-test")
	if V2() {
		other = filepath.Join(Root, "wovyr-not-ours-test")
	}
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	defer syscall.Rmdir(other)
	n, err := ReconcileUnder(context.Background(), scope)
	if err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if n < 1 || Exists(rel) {
		t.Fatalf("Reconcile removed %d, %s exists=%v", n, rel, Exists(rel))
	}
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("Reconcile touched a group it does not own: %v", err)
	}
}
