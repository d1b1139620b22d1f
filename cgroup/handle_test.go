package cgroup

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
)

// TestHandleAddsAndAccounts: a process added through a Handle is in the
// group (it is found and killed), and the handle's usage reads agree with
// the path-based ones.
func TestHandleAddsAndAccounts(t *testing.T) {
	requireRoot(t)
	g := testGroup(t, Limits{Memory: 64 << 20, Pids: 16})
	h := openHandle(t, g)
	if err := h.Kill(context.Background()); err != nil {
		t.Fatalf("Kill of an empty group: %v", err)
	}
	// Read once before: later reads of the same open files must be fresh.
	if before := h.Usage(); before.CPU != 0 || before.PeakMemory != 0 {
		t.Fatalf("usage of a fresh group: %+v", before)
	}

	// Busy for a while, touching 8 MiB, then exit.
	add := func(pid int) error {
		if err := h.Add(pid); err != nil {
			return err
		}
		if pids, _ := g.Pids(); !slices.Contains(pids, pid) {
			return fmt.Errorf("pid %d not in group after Handle.Add: %v", pid, pids)
		}
		return nil
	}
	cmd := startWith(t, add, `x=$(head -c 8388608 /dev/zero | tr '\0' a); i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done`)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := h.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, want := h.Usage(), g.Usage()
	if got != want {
		t.Fatalf("Handle.Usage %+v, Group.Usage %+v", got, want)
	}
	if got.CPU <= 0 || got.PeakMemory < 8<<20 {
		t.Fatalf("usage %+v: want CPU > 0 and peak ≥ 8 MiB", got)
	}
}

// TestHandleKillDoesNotTrustCachedPidList pins a bug: v1 keeps an open
// cgroup.procs file's pid list for a second, so a handle that read it while
// the group was empty saw it empty again after a member joined.
func TestHandleKillDoesNotTrustCachedPidList(t *testing.T) {
	requireRoot(t)
	g := testGroup(t, Limits{Pids: 16})
	h := openHandle(t, g)
	// An earlier read through the handle, while empty, must not be reused.
	if err := h.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	cmd := start(t, g, "sleep 300")
	if err := h.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	if pids, _ := g.Pids(); len(pids) != 0 {
		_ = g.Kill(context.Background())
		_ = cmd.Wait()
		t.Fatalf("Handle.Kill left %v", pids)
	}
	err := cmd.Wait()
	if ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("member not killed: %v", err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func openHandle(t *testing.T, g *Group) *Handle {
	t.Helper()
	h, err := g.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if err := h.OpenUsage(); err != nil {
		t.Fatal(err)
	}
	return h
}
