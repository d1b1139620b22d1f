package native

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/cgroup"
	"github.com/wovyr/wovyr/sandbox"
)

// On cgroup v1 the workload is born in its group (its forking thread visits
// it); that thread then leaves memory but stays counted in pids.
func TestWorkloadBornInGroup(t *testing.T) {
	if cgroup.V2() {
		t.Skip("v2 moves the child; threads visit only v1 groups")
	}
	b := newBackend(t)
	ctx := context.Background()
	sb, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(ctx)
	rel := sb.(*nativeSandbox).group.Path()
	// The thread leaves memory while the workload runs: wait for that.
	res, err := sb.Run(ctx, inv("/bin/sh", "-c", fmt.Sprintf(
		"cat /proc/self/cgroup; echo @; for i in $(seq 100); do grep -qx %[3]d %[1]s/memory/%[2]s/cgroup.procs || break; sleep 0.05; done; "+
			"cat %[1]s/memory/%[2]s/cgroup.procs; echo @; cat %[1]s/pids/%[2]s/cgroup.procs",
		cgroup.Root, rel, os.Getpid())))
	if err != nil || res.Class != sandbox.OK {
		t.Fatalf("run: %+v %v", res, err)
	}
	parts := strings.Split(string(res.Stdout), "@\n")
	if len(parts) != 3 {
		t.Fatalf("stdout %q", res.Stdout)
	}
	for _, c := range []string{"memory", "pids", "cpu", "cpuacct", "freezer"} {
		if cgroup.PathIn(parts[0], c) != "/"+rel {
			t.Errorf("workload not in %s of %s:\n%s", c, rel, parts[0])
		}
	}
	me := fmt.Sprint(os.Getpid())
	if slices.Contains(strings.Fields(parts[1]), me) {
		t.Errorf("wovyr (%s) in the workload's memory group while it runs: %q", me, parts[1])
	}
	if !slices.Contains(strings.Fields(parts[2]), me) {
		t.Errorf("wovyr's forking thread not in pids while the workload runs: %q", parts[2])
	}
}

// The memcg OOM killer weighs a whole process's memory for any thread in
// the group; a wovyr far bigger than the workload's limit must never be
// its victim.
func TestOOMSparesWovyr(t *testing.T) {
	ballast := make([]byte, 96<<20)
	for i := range ballast {
		ballast[i] = 1 // resident, so that wovyr outweighs the workload
	}
	i := inv("/bin/sh", "-c", `x=$(head -c 134217728 /dev/zero | tr '\0' a); echo ${#x}`)
	i.Limits.Memory = 32 << 20
	res := run(t, newBackend(t), i)
	runtime.KeepAlive(ballast)
	if res.Class != sandbox.OOM {
		t.Fatalf("class %q, want oom", res.Class)
	}
}
