package native

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/cgroup"
	"github.com/wovyr/wovyr/sandbox"
)

const dyingWovyrEnv = "WOVYR_NATIVE_TEST_DYING_WOVYR"

// dyingWovyr is the helper for TestWorkloadDiesWithWovyr: it starts a
// long workload, prints its pid and its cgroup, and waits to be killed.
func dyingWovyr(scratch string) int {
	b, err := New(Config{ScratchDir: scratch})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	ctx := context.Background()
	sb, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	go sb.Run(ctx, inv("/bin/sleep", "1000"))
	g := sb.(*nativeSandbox).group
	for {
		if pids, _ := g.Pids(); len(pids) == 1 {
			fmt.Println(pids[0], g.Path())
			select {} // until killed
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWorkloadDiesWithWovyr: when wovyr is SIGKILLed while a workload runs,
// the workload is killed too (its parent-death signal, armed by the parked
// thread that forked it), not left running as an orphan.
func TestWorkloadDiesWithWovyr(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (CI runs as root)")
	}
	scratch, err := os.MkdirTemp("", "wovyr-native-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(scratch)
	helper := exec.Command(os.Args[0])
	helper.Env = append(os.Environ(), dyingWovyrEnv+"="+scratch)
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	var pid int
	var group string
	if _, err := fmt.Sscan(line, &pid, &group); err != nil {
		helper.Process.Kill()
		helper.Wait()
		t.Fatalf("helper said %q: %v", line, err)
	}
	defer func() {
		// What the dead wovyr leaves is start-up's to reconcile.
		if _, err := cgroup.ReconcileUnder(context.Background(), group); err != nil {
			t.Error(err)
		}
		if err := reconcileScratch(scratch); err != nil {
			t.Error(err)
		}
	}()
	if !alive(pid) {
		t.Fatalf("workload %d not running before wovyr died", pid)
	}
	helper.Process.Kill()
	helper.Wait()
	for deadline := time.Now().Add(10 * time.Second); alive(pid); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("workload %d survived wovyr's death", pid)
		}
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

// threadsInNetns lists wovyr's threads whose network namespace is ns
// (as readlink shows it, "net:[inode]").
func threadsInNetns(t *testing.T, want string) []string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var in []string
	for _, task := range tasks {
		if got, _ := os.Readlink("/proc/self/task/" + task.Name() + "/ns/net"); got == want {
			in = append(in, task.Name())
		}
	}
	return in
}

// TestSpawnerThreadLifecycle: Prepare parks exactly one thread in the
// sandbox's namespace, never the main thread (whose namespace /proc shows
// for all of wovyr); it is gone after the run, and after Destroy of a
// sandbox that never ran.
func TestSpawnerThreadLifecycle(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	gone := func(ns string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); len(threadsInNetns(t, ns)) > 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("threads %v still in the sandbox netns", threadsInNetns(t, ns))
			}
		}
	}
	for _, runIt := range []bool{true, false} {
		sb, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
		if err != nil {
			t.Fatal(err)
		}
		ns, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", sb.(*nativeSandbox).netns.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		parked := threadsInNetns(t, ns)
		if len(parked) != 1 || parked[0] == fmt.Sprint(os.Getpid()) {
			t.Fatalf("threads in the sandbox netns after Prepare: %v (main is %d)", parked, os.Getpid())
		}
		if runIt {
			res, err := sb.Run(ctx, inv("/bin/true"))
			if err != nil || res.Class != sandbox.OK || res.ExitCode != 0 {
				t.Fatalf("run: %+v %v", res, err)
			}
			gone(ns)
		}
		if err := sb.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
		if !runIt {
			gone(ns)
		}
	}
}
