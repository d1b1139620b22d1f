package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/cluster"
	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// Three weighted tenants of the fairness run, each with its token.
var fairWeights = map[string]int{"light": 1, "middle": 2, "heavy": 3}

func init() {
	for name := range fairWeights {
		tokens[name] = name + "-token"
	}
}

func fairConfig(name, region string) config.Config {
	cfg := config.Config{Region: region, Node: name, ShutdownGrace: config.Duration(5 * time.Second), Concurrency: 1,
		Residency: config.Residency{Regions: []string{"eu-west"}}, Pools: []config.Pool{{MinWarm: 0, MaxWarm: 1}}}
	for _, n := range slices.Sorted(func(yield func(string) bool) {
		for n := range fairWeights {
			if !yield(n) {
				return
			}
		}
	}) {
		cfg.Tenants = append(cfg.Tenants, config.Tenant{Name: n, TokenSHA256: []string{config.HashToken(tokens[n])},
			Weight: fairWeights[n], Rate: 10000, Burst: 10000})
	}
	return cfg
}

// TestClusterFairness is the tenant-fairness run across two nodes of one
// region: three tenants weighted 1:2:3, each node running one invocation
// at a time. The light tenant submits everything to eu-1, the others to
// eu-2, so that a node keeping what it was given would hand light all of
// eu-1, half the region, where its weight is a sixth. Every tenant keeps
// work queued until the heavy one runs out; over that window each
// tenant's starts across both nodes must be its weight's share.
func TestClusterFairness(t *testing.T) {
	nodes := startNodes(t, []nodeSpec{{name: "eu-1", region: "eu-west"}, {name: "eu-2", region: "eu-west"}}, 1, fairConfig,
		cluster.Options{Heartbeat: 400 * time.Millisecond, Capacity: 1, AcceptTimeout: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const each = 30
	via := map[string]*testNode{"light": nodes[0], "middle": nodes[1], "heavy": nodes[1]}
	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	errs := make(chan error, 3*each)
	for tenant, n := range via {
		c := n.client(tenant)
		for range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				inv := command()
				inv.Workload.Argv = []string{"/bin/sleep", "0.2"}
				rec, err := c.Submit(ctx, inv, 0)
				if err != nil {
					errs <- fmt.Errorf("%s: %w", tenant, err)
					return
				}
				mu.Lock()
				ids = append(ids, tenant+" "+rec.ID)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	submitted := time.Now()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	type start struct {
		tenant, node string
		at           time.Time
	}
	var starts []start
	for _, line := range ids {
		var tenant, id string
		fmt.Sscan(line, &tenant, &id)
		rec, err := nodes[0].client(tenant).Get(ctx, id, time.Minute)
		for err == nil && rec.State != client.StateDone && ctx.Err() == nil {
			rec, err = nodes[0].client(tenant).Get(ctx, id, time.Minute)
		}
		if err != nil || rec.Result == nil || rec.Result.ExitCode != 0 || rec.Region != "eu-west" {
			t.Fatalf("%s %s: %+v %v", tenant, id, rec, err)
		}
		var at time.Time
		for _, tr := range rec.Transitions {
			if tr.State == string(store.Running) {
				at = tr.At
			}
		}
		starts = append(starts, start{tenant, rec.Node, at})
	}
	slices.SortFunc(starts, func(a, b start) int { return a.at.Compare(b.at) })

	// The window: from the last submission to the heavy tenant's last
	// start, while all three had work queued.
	var end time.Time
	for _, s := range starts {
		if s.tenant == "heavy" {
			end = s.at
		}
	}
	got := map[string]int{}
	byNode := map[string]int{}
	total := 0
	for _, s := range starts {
		if s.at.After(submitted) && !s.at.After(end) {
			got[s.tenant]++
			byNode[s.node]++
			total++
		}
	}
	t.Logf("window %d starts %v (by node %v)", total, got, byNode)
	if total < 24 || byNode["eu-1"] == 0 || byNode["eu-2"] == 0 {
		t.Fatalf("too short a window to judge: %d starts, by node %v", total, byNode)
	}
	sum := 0
	for _, w := range fairWeights {
		sum += w
	}
	for tenant, w := range fairWeights {
		want := float64(total*w) / float64(sum)
		// Each node's picks are within a pick of the weights, and each
		// holds one next in line: three starts either way.
		if math.Abs(float64(got[tenant])-want) > 3 {
			t.Errorf("%s (weight %d): %d of %d starts, want %.1f ± 3", tenant, w, got[tenant], total, want)
		}
	}
}

// TestClusterQueue: while every node of the region is full, an invocation
// waits in the region's queue and is answered for by every node as
// queued; a cancel ends it there, never run; one that waits past the
// queue's deadline ends failed (unavailable), once, the same on every
// node; and the region takes work again once it has room.
func TestClusterQueue(t *testing.T) {
	nodes := startNodes(t, []nodeSpec{{name: "eu-1", region: "eu-west"}, {name: "eu-2", region: "eu-west"}}, 1, fairConfig,
		cluster.Options{Heartbeat: 400 * time.Millisecond, Capacity: 1, AcceptTimeout: 200 * time.Millisecond, QueueTimeout: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b := nodes[0].client("middle"), nodes[1].client("middle")
	// Each node holds twice its concurrency of one: four fill the region.
	// (A fill that waits past the short deadline, as a subject's first
	// message may while its consumer is made, is replaced.)
	var fill []string
	for try := 0; len(fill) < 4; try++ {
		if try == 20 {
			t.Fatalf("only %d of 4 fills taken", len(fill))
		}
		inv := command()
		inv.Workload.Argv = []string{"/bin/sleep", "60"}
		rec, err := a.Submit(ctx, inv, 0)
		for err == nil && rec.Node == "" && rec.State == client.StateQueued && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
			rec, err = a.Get(ctx, rec.ID, 0)
		}
		if err != nil {
			t.Fatalf("fill: %+v %v", rec, err)
		}
		if rec.Node != "" && rec.State != client.StateFailed {
			fill = append(fill, rec.ID)
		}
	}
	echo := command()
	echo.Workload.Argv = []string{"/bin/echo", "queued"}
	waiting, err := a.Submit(ctx, echo, 0)
	if err != nil || waiting.State != client.StateQueued || waiting.Node != "" || waiting.Region != "eu-west" {
		t.Fatalf("submitted to a full region: %+v %v, want queued in eu-west on no node", waiting, err)
	}
	if got, err := b.Get(ctx, waiting.ID, 0); err != nil || got.State != client.StateQueued || got.Node != "" {
		t.Fatalf("the queued one through eu-2: %+v %v", got, err)
	}
	var ce *client.Error
	if _, err := nodes[1].client("light").Get(ctx, waiting.ID, 0); !errors.As(err, &ce) || ce.Status != 404 || ce.Message != "not-found (id): no invocation "+waiting.ID {
		t.Fatalf("another tenant's queued invocation: %v, want the 404 of a missing one", err)
	}
	if _, err := nodes[1].client("light").Cancel(ctx, waiting.ID); !errors.As(err, &ce) || ce.Status != 404 {
		t.Fatalf("another tenant's cancel of a queued invocation: %v, want 404", err)
	}

	// Cancelled in the queue: killed, never run, and only once.
	doomed, err := a.Submit(ctx, echo, 0)
	if err != nil || doomed.State != client.StateQueued {
		t.Fatalf("second queued: %+v %v", doomed, err)
	}
	cancelled, err := b.Cancel(ctx, doomed.ID)
	if err != nil || cancelled.State != client.StateFailed || cancelled.Result == nil || cancelled.Result.Class != sandbox.Killed ||
		cancelled.Result.Error != "killed: cancelled before it started" {
		t.Fatalf("cancel in the queue: %+v %v", cancelled, err)
	}
	if _, err := a.Cancel(ctx, doomed.ID); !errors.As(err, &ce) || ce.Status != 409 {
		t.Fatalf("a second cancel: %v, want 409", err)
	}

	// Past the deadline (2s, and the grace a taker gets to record it):
	// failed, unavailable, on both nodes alike.
	time.Sleep(time.Until(waiting.Created.Add(2*time.Second + 5*time.Second + 200*time.Millisecond)))
	want := "unavailable: no node of region eu-west took invocation " + waiting.ID + " within 2s"
	for _, c := range []*client.Client{b, a} {
		got, err := c.Get(ctx, waiting.ID, 0)
		if err != nil || got.State != client.StateFailed || got.Result == nil || got.Result.Class != "unavailable" || got.Result.Error != want {
			t.Fatalf("past its deadline: %+v %+v %v, want failed %q", got, got.Result, err, want)
		}
	}

	// The region has room again once the fill ends; the cancelled one
	// never ran, and new work runs.
	for _, id := range fill {
		if _, err := a.Cancel(ctx, id); err != nil {
			t.Fatalf("cancel %s: %v", id, err)
		}
	}
	done, err := b.Submit(ctx, echo, 30*time.Second)
	if err != nil || done.State != client.StateDone || string(done.Result.Stdout) != "queued\n" {
		t.Fatalf("after the fill: %+v %v", done, err)
	}
	if got, err := a.Get(ctx, doomed.ID, 0); err != nil || got.State != client.StateFailed || got.Result.Class != sandbox.Killed {
		t.Fatalf("the cancelled one later: %+v %v", got, err)
	}
}
