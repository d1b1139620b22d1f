package oci

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/resource"
	"github.com/wovyr/wovyr/sandbox"
)

func TestCPUPlacerSpreads(t *testing.T) {
	p := &cpuPlacer{cpus: []int{2, 5, 7}, live: map[int]int{}}
	var got []int
	var releases []func()
	for range 4 {
		c, rel := p.acquire()
		got = append(got, c)
		releases = append(releases, rel)
	}
	if want := []int{2, 5, 7, 2}; !slices.Equal(got, want) {
		t.Fatalf("placements %v, want %v", got, want)
	}
	releases[1]() // 5 is now the least used
	releases[1]() // twice: counted once
	if c, _ := p.acquire(); c != 5 {
		t.Fatalf("after releasing 5, got %d", c)
	}
	if p.live[5] != 1 || p.live[2] != 2 || p.live[7] != 1 {
		t.Fatalf("live counts %v", p.live)
	}
}

// allowedCPUs reads a task's affinity as the kernel reports it.
func allowedCPUs(t *testing.T, pid, tid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return "gone"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no Cpus_allowed_list for %d/%d", pid, tid)
	return ""
}

func TestStartOnCPU(t *testing.T) {
	p, err := newCPUPlacer()
	if err != nil {
		t.Fatal(err)
	}
	cpu := p.cpus[len(p.cpus)-1]
	cmd := exec.Command("sleep", "5")
	if err := startOnCPU(cmd, cpu); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if got := allowedCPUs(t, cmd.Process.Pid, cmd.Process.Pid); got != strconv.Itoa(cpu) {
		t.Errorf("child allowed on %q, want %d", got, cpu)
	}
	// The caller and the rest of the process stay free.
	var self unix.CPUSet
	if err := unix.SchedGetaffinity(0, &self); err != nil {
		t.Fatal(err)
	}
	if self != p.all() {
		t.Errorf("caller's affinity changed to %v", cpuList(self))
	}
}

// sandboxAffinities is the set of CPU lists of every task of the sandbox's runtime
// cgroup (gofer, Sentry, stubs).
func sandboxAffinities(t *testing.T, s *Sandbox) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	for _, pid := range cgroupProcs(poolCgroup(s.id)) {
		tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		for _, task := range tasks {
			tid, _ := strconv.Atoi(task.Name())
			var set unix.CPUSet
			if unix.SchedGetaffinity(tid, &set) == nil {
				seen[fmt.Sprint(cpuList(set))] = true
			}
		}
	}
	return seen
}

// TestGVisorSandboxesArePinned: every task of a pooled gVisor sandbox is born on
// one CPU, concurrent sandboxes are spread over the CPUs, and a claim for
// more than one core widens the sandbox to all of them.
func TestGVisorSandboxesArePinned(t *testing.T) {
	cfg := testConfig(t)
	cfg.Pooled = true
	b, err := NewGVisor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if c := b.Probe(ctx); !c.Available {
		t.Skip(c.Reason)
	}
	var sbs []*Sandbox
	defer func() {
		for _, s := range sbs {
			_ = s.Destroy(ctx)
			assertNoLeftovers(t, b, s)
		}
	}()
	cpus := map[string]bool{}
	n := min(len(b.placer.cpus), 4) // each on a CPU of its own
	for range n {
		sb, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
		if err != nil {
			t.Fatal(err)
		}
		s := sb.(*Sandbox)
		sbs = append(sbs, s)
		aff := sandboxAffinities(t, s)
		if len(aff) != 1 {
			t.Fatalf("sandbox %s: tasks on %v, want one CPU", s.id, aff)
		}
		for a := range aff {
			cpus[a] = true
		}
	}
	if len(cpus) != n {
		t.Errorf("%d sandboxes landed on CPUs %v, want one each of %v", len(sbs), cpus, b.placer.cpus)
	}
	// One core: stays on its CPU; two cores: every CPU.
	for i, millis := range []int64{1000, 2000} {
		if i >= len(sbs) {
			break
		}
		s := sbs[i]
		inv := cmd("/bin/sh", "-c", "echo ok")
		inv.Resources.Vector = resource.Vector{CPUMillis: millis}
		res, err := s.Run(ctx, inv)
		if err != nil || string(res.Stdout) != "ok\n" {
			t.Fatalf("run: %v %+v", err, res)
		}
		aff := sandboxAffinities(t, s)
		want := map[string]bool{}
		if millis > 1000 {
			want[fmt.Sprint(b.placer.cpus)] = true
		} else {
			want = aff
			if len(aff) != 1 {
				t.Errorf("one-core claim: tasks on %v", aff)
			}
		}
		if len(aff) != len(want) {
			t.Errorf("cpu millis %d: tasks on %v, want %v", millis, aff, want)
		}
		for a := range want {
			if !aff[a] {
				t.Errorf("cpu millis %d: tasks on %v, want %v", millis, aff, want)
			}
		}
	}
}
