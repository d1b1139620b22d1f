package oci

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/cgroup"
)

// assertNoLeftovers checks real host state after a sandbox is destroyed: no
// process in its cgroups or its uid range, no cgroup in any hierarchy, no
// mount, no scratch/bundle directory, no runtime state.
func assertNoLeftovers(t testing.TB, b *Backend, s *Sandbox) {
	t.Helper()
	id := s.id
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		if zombie(p) {
			continue // dead; only the host's reaper still holds its pid
		}
		cg, _ := os.ReadFile(filepath.Join(p, "cgroup"))
		if strings.Contains(string(cg), id) {
			t.Errorf("process %s is still in a cgroup of %s", filepath.Base(p), id)
		}
		if s.slot != nil {
			if uid, ok := procUID(filepath.Join(p, "status")); ok && uid >= s.slot.ids.HostUID && uid < s.slot.ids.HostUID+s.slot.ids.Size {
				t.Errorf("process %s runs as uid %d of %s's range", filepath.Base(p), uid, id)
			}
		}
	}
	for _, h := range hierarchies() {
		for _, rel := range []string{"wovyr/_pool/" + id, "wovyr/acme/" + id, "wovyr/beta/" + id} {
			if _, err := os.Stat(filepath.Join(h, rel)); err == nil {
				t.Errorf("cgroup %s left in %s", rel, h)
			}
		}
	}
	if m := mountsUnder(filepath.Join(b.run, "sb", id)); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	if _, err := os.Stat(filepath.Join(b.run, "sb", id)); err == nil {
		t.Errorf("scratch dir of %s left", id)
	}
	for _, rt := range []string{"crun", "runc", "runsc"} {
		ents, _ := os.ReadDir(filepath.Join(b.run, "state", rt))
		for _, e := range ents {
			if strings.Contains(e.Name(), id) {
				t.Errorf("%s state %s left", rt, e.Name())
			}
		}
	}
}

func procUID(status string) (uint32, bool) {
	f, err := os.Open(status)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			fs := strings.Fields(v)
			if len(fs) > 0 {
				n, err := strconv.ParseUint(fs[0], 10, 32)
				return uint32(n), err == nil
			}
		}
	}
	return 0, false
}

func zombie(proc string) bool {
	b, err := os.ReadFile(filepath.Join(proc, "stat"))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

// TestReconcileSparesOtherStateDirs: Reconcile of one state directory
// leaves alone a sandbox cgroup it has no scratch for — another daemon's or
// test run's live sandbox — while it still removes its own stale ones.
func TestReconcileSparesOtherStateDirs(t *testing.T) {
	ctx := context.Background()
	state := t.TempDir()
	if err := os.MkdirAll(filepath.Join(runDir(state), "sb"), 0o700); err != nil {
		t.Fatal(err)
	}
	foreign, err := cgroup.New(cgroup.Prefix+"/_pool/wovyr-c-foreign"+fmt.Sprint(os.Getpid()), cgroup.Limits{Pids: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Destroy(ctx)
	ownID := "wovyr-c-own" + fmt.Sprint(os.Getpid())
	own, err := cgroup.New(cgroup.Prefix+"/_pool/"+ownID, cgroup.Limits{Pids: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Destroy(ctx)
	if err := os.MkdirAll(filepath.Join(runDir(state), "sb", ownID), 0o700); err != nil {
		t.Fatal(err) // scratch with no live owner: stale
	}
	if _, err := Reconcile(ctx, state); err != nil {
		t.Fatal(err)
	}
	if d := cgroupDirs(foreign.Path()); len(d) == 0 {
		t.Errorf("another state directory's cgroup was removed")
	}
	if d := cgroupDirs(own.Path()); len(d) != 0 {
		t.Errorf("this state directory's stale cgroup survived: %v", d)
	}
}

// TestSlotsAreHostWide: uid ranges are handed out through host-wide locks
// (no state directory in the call), so a second daemon or test run with
// another state directory can never get a range a live sandbox holds.
func TestSlotsAreHostWide(t *testing.T) {
	base := uint32(3<<30) + uint32(os.Getpid()%1000)*4*rangeSize // a base no other run uses
	a, err := acquireSlot(base, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer a.release()
	b, err := acquireSlot(base, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.release()
	if a.ids.HostUID == b.ids.HostUID {
		t.Fatalf("two live slots share host uid %d", a.ids.HostUID)
	}
	if _, err := acquireSlot(base, 2); err == nil || !strings.Contains(err.Error(), "all 2 uid ranges are in use") {
		t.Fatalf("third slot: %v, want all 2 uid ranges in use", err)
	}
	defer os.RemoveAll(filepath.Join(slotLocks, strconv.FormatUint(uint64(base), 10)))
}

// TestTreeEmpty: the one-read emptiness check sees a task in a child
// cgroup, and sees it gone once it is reaped.
func TestTreeEmpty(t *testing.T) {
	rel := cgroup.Prefix + "/_pool/wovyr-c-treeempty" + fmt.Sprint(os.Getpid())
	g, err := cgroup.New(rel+"/runtime", cgroup.Limits{Pids: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = removeCgroup(context.Background(), rel) }()
	if !treeEmpty(rel) {
		t.Fatal("a fresh cgroup tree is not empty")
	}
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	if err := g.Add(sleeper.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if treeEmpty(rel) {
		t.Error("a tree with a task in its child reads empty")
	}
	_ = sleeper.Process.Kill()
	_ = sleeper.Wait()
	if !treeEmpty(rel) {
		t.Error("the tree still reads busy after its task was reaped")
	}
	if err := removeCgroup(context.Background(), rel); err != nil {
		t.Fatal(err)
	}
	if d := cgroupDirs(rel); len(d) != 0 {
		t.Errorf("left %v", d)
	}
}
