package cgroup

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// onLockedThread runs fn on an OS thread that ends with it, never the
// main one (whose moves would move the process leader).
func onLockedThread(fn func()) {
	done := make(chan struct{})
	var run func()
	run = func() {
		runtime.LockOSThread() // never unlocked: the thread ends with fn
		if syscall.Gettid() == os.Getpid() {
			go run() // another thread, while this one stays busy
			<-done
			runtime.UnlockOSThread()
			return
		}
		defer close(done)
		fn()
	}
	go run()
	<-done
}

func TestVisitChildIsBornInsideAndKillSparesUs(t *testing.T) {
	requireRoot(t)
	if V2() {
		t.Skip("thread moves are cgroup v1 only; v2 hosts move the child")
	}
	g := testGroup(t, Limits{Pids: 8})
	onLockedThread(func() {
		v, err := g.NewVisit("memory")
		if err != nil {
			t.Error(err)
			return
		}
		defer v.Close()
		if err := v.Enter(); err != nil {
			t.Error(err)
			return
		}
		defer v.Leave()
		// Forked by this thread: born in every controller of g.
		out, err := exec.Command("/bin/cat", "/proc/self/cgroup").Output()
		if err != nil {
			t.Error(err)
			return
		}
		for _, c := range v1Controllers {
			if PathIn(string(out), c) != "/"+g.Path() {
				t.Errorf("child not born in %s of %s:\n%s", c, g.Path(), out)
			}
		}
		// Only our thread is inside: Kill signals nothing and returns.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := g.Kill(ctx); err != nil {
			t.Errorf("Kill with only wovyr's thread inside: %v", err)
		}
		h := g.NewHandle()
		defer h.Close()
		if err := h.OpenUsage(); err != nil {
			t.Error(err)
			return
		}
		h.Own(1)
		if err := h.Kill(ctx); err != nil {
			t.Errorf("Handle.Kill: %v", err)
		}
		if err := v.Leave("memory"); err != nil || v.In("memory") {
			t.Errorf("leave memory: %v", err)
		}
		own, _ := os.ReadFile("/proc/thread-self/cgroup")
		if PathIn(string(own), "memory") == "/"+g.Path() || PathIn(string(own), "pids") != "/"+g.Path() {
			t.Errorf("after leaving memory:\n%s", own)
		}
	})
	if pids, _ := g.Pids(); len(pids) != 0 {
		t.Fatalf("group still lists %v after the thread left", pids)
	}
}

// A thread of another process (another wovyr's forking thread) in a group
// that a reconcile kills: the process survives; real members die.
func TestKillSparesForeignVisitor(t *testing.T) {
	requireRoot(t)
	if V2() {
		t.Skip("thread moves are cgroup v1 only")
	}
	if dir := os.Getenv("WOVYR_TEST_VISIT"); dir != "" {
		visitorHelper(dir)
		return
	}
	g := testGroup(t, Limits{Pids: 8})
	helper := exec.Command(os.Args[0], "-test.run=^TestKillSparesForeignVisitor$")
	helper.Env = append(os.Environ(), "WOVYR_TEST_VISIT="+g.Path())
	in, _ := helper.StdinPipe()
	outp, _ := helper.StdoutPipe()
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer helper.Wait()
	defer in.Close()
	line, _ := bufio.NewReader(outp).ReadString('\n')
	if strings.TrimSpace(line) != "inside" {
		helper.Process.Kill()
		t.Fatalf("helper said %q", line)
	}
	member := start(t, g, "sleep 300")
	if err := g.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := member.Wait(); err == nil {
		t.Fatal("member survived Kill")
	}
	if err := helper.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("Kill killed the visiting process: %v", err)
	}
	in.Close()
	if err := helper.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
}

// visitorHelper puts one of its threads in every controller of rel and
// waits for stdin to close.
func visitorHelper(rel string) {
	g := &Group{rel: rel}
	for _, c := range v1Controllers {
		g.dirs = append(g.dirs, Root+"/"+c+"/"+rel)
	}
	onLockedThread(func() {
		v, err := g.NewVisit()
		if err == nil {
			err = v.Enter()
		}
		if err != nil {
			os.Stdout.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString("inside\n")
		buf := make([]byte, 1)
		os.Stdin.Read(buf)
		if err := v.Leave(); err != nil {
			os.Exit(2)
		}
	})
	os.Exit(0)
}
