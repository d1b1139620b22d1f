package server_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/sandbox"
)

// BenchmarkIdleSessions holds N container sessions live at once (N is
// $WOVYR_SESSIONS, default 200), created through the HTTP API eight at a
// time, each proven live by an exec of /bin/true and then left idle. It
// reports the creation latency, and the memory one idle session holds:
// its sandbox cgroup's usage (the agent, the container's processes and
// page cache charged to it), and the host's MemAvailable drop per session
// (everything: runtime state, the daemon's bookkeeping, kernel objects).
// Every session is then exec'd once more and deleted; any error fails
// the run, and no container sandbox cgroup may be left beyond the pool's
// warm ones.
//
//	go test ./server -run '^$' -bench IdleSessions -benchtime 1x
func BenchmarkIdleSessions(b *testing.B) {
	n := 200
	if v, err := strconv.Atoi(os.Getenv("WOVYR_SESSIONS")); err == nil && v > 0 {
		n = v
	}
	cfg := testConfig()
	cfg.Concurrency = 8
	cfg.Tenants[0].MaxSessions = n
	cfg.Pools = []config.Pool{{Backend: "container", MaxLive: n + 8, MaxWarm: 2}}
	var img string
	h := newHarnessWith(b, cfg, "", containerSessions(b, &img))
	c := client.New(h.url, aliceToken, nil)
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		idleSessions(b, ctx, c, n)
	}
}

func idleSessions(b *testing.B, ctx context.Context, c *client.Client, n int) {
	time.Sleep(2 * time.Second) // the pool's refill settles
	baseGroups := len(containerCgroups(b))
	avail := memAvailable(b)
	ids := make([]string, n)
	took := make([]time.Duration, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			t0 := time.Now()
			s, err := c.CreateSession(ctx, &client.SessionRequest{Image: "busybox", Policy: sandbox.Policy{Trust: sandbox.Trusted},
				IdleTimeout: 30 * time.Minute})
			if err == nil {
				took[i], ids[i] = time.Since(t0), s.ID
				var res *sandbox.Result
				if res, err = c.Exec(ctx, s.ID, &sandbox.Exec{Argv: []string{"/bin/true"}}); err == nil && res.ExitCode != 0 {
					err = fmt.Errorf("exec: %+v", res)
				}
			}
			if err != nil {
				errs <- fmt.Errorf("session %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	all := time.Since(start)
	close(errs)
	for err := range errs {
		b.Error(err)
	}
	if b.Failed() {
		b.FailNow()
	}
	time.Sleep(2 * time.Second) // idle: nothing runs in them
	groups := containerCgroups(b)
	var used int64
	for _, g := range groups {
		used += g
	}
	perAvail := float64(avail-memAvailable(b)) / float64(n)
	live := len(groups) - baseGroups
	if live < n {
		b.Errorf("%d sandbox cgroups beyond the pool's, want at least %d sessions'", live, n)
	}
	slices.Sort(took)
	b.ReportMetric(float64(n), "sessions")
	b.ReportMetric(float64(took[n/2].Microseconds())/1000, "create-p50-ms")
	b.ReportMetric(float64(took[n*99/100].Microseconds())/1000, "create-p99-ms")
	b.ReportMetric(all.Seconds(), "create-all-s")
	b.ReportMetric(float64(used)/float64(len(groups))/(1<<20), "cgroup-MiB/session")
	b.ReportMetric(perAvail/(1<<20), "host-MiB/session")

	for _, id := range ids {
		if res, err := c.Exec(ctx, id, &sandbox.Exec{Argv: []string{"/bin/true"}}); err != nil || res.ExitCode != 0 {
			b.Errorf("exec after idling in %s: %+v %v", id, res, err)
		}
	}
	for _, id := range ids {
		if _, err := c.DeleteSession(ctx, id); err != nil {
			b.Errorf("delete %s: %v", id, err)
		}
	}
	time.Sleep(2 * time.Second)
	if left := len(containerCgroups(b)); left > baseGroups+2 {
		b.Errorf("%d container sandbox cgroups after deleting every session, want the pool's %d", left, baseGroups)
	}
}

// containerCgroups maps each container sandbox's cgroup (wovyr-c-*) to its
// memory usage in bytes.
func containerCgroups(b *testing.B) map[string]int64 {
	b.Helper()
	dir, file := "/sys/fs/cgroup/wovyr/_pool", "memory.current" // v2
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err == nil {
		dir, file = "/sys/fs/cgroup/memory/wovyr/_pool", "memory.usage_in_bytes"
	}
	ents, _ := os.ReadDir(dir)
	out := map[string]int64{}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "wovyr-c-") {
			continue
		}
		v, _ := os.ReadFile(filepath.Join(dir, e.Name(), file))
		out[e.Name()], _ = strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
	}
	return out
}

// memAvailable is the host's MemAvailable, in bytes.
func memAvailable(b *testing.B) int64 {
	b.Helper()
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	b.Fatal("no MemAvailable in /proc/meminfo")
	return 0
}
