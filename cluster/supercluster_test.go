package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/cluster"
	"github.com/wovyr/wovyr/sandbox"
)

// startSupercluster starts the documented multi-region layout on loopback:
// a NATS cluster per region (eu-west: two servers, us-east: one), joined
// by gateways, a node on each server, every region's data pinned to its
// own servers (PinQueues).
func startSupercluster(t *testing.T) []*testNode {
	t.Helper()
	if testing.Short() {
		t.Skip("starts two NATS clusters and three nodes")
	}
	// us-1 connects first: were any bucket cluster-wide, it would be made
	// on us-east's cluster, which the test then loses.
	usUp := make(chan struct{})
	specs := []nodeSpec{{name: "eu-1", region: "eu-west", after: usUp}, {name: "eu-2", region: "eu-west", after: usUp},
		{name: "us-1", region: "us-east", connected: usUp}}
	routes, gws := freePorts(t, len(specs)), freePorts(t, len(specs))
	routeURLs, gwURLs := map[string][]string{}, map[string][]string{}
	for i, sp := range specs {
		routeURLs[sp.region] = append(routeURLs[sp.region], fmt.Sprintf("nats-route://127.0.0.1:%d", routes[i]))
		gwURLs[sp.region] = append(gwURLs[sp.region], fmt.Sprintf("nats://127.0.0.1:%d", gws[i]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodes := make([]*testNode, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, sp := range specs {
		others := map[string][]string{}
		for region, urls := range gwURLs {
			if region != sp.region {
				others[region] = urls
			}
		}
		eo := cluster.EmbeddedOptions{ClusterListen: fmt.Sprintf("127.0.0.1:%d", routes[i]), ClusterName: sp.region,
			Routes: routeURLs[sp.region], GatewayListen: fmt.Sprintf("127.0.0.1:%d", gws[i]), Gateways: others}
		o := cluster.Options{Name: sp.name, Region: sp.region, Replicas: 1, PinQueues: true, Heartbeat: 400 * time.Millisecond, Capacity: 8}
		wg.Go(func() { nodes[i], errs[i] = startNode(t, ctx, nodeConfig(sp.name, sp.region), o, sp, eo) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	waitLive(t, ctx, nodes)
	return nodes
}

// TestSuperclusterResidency: over a cluster per region joined by gateways,
// every tenant × request × API node runs where residency allows (or is
// refused), a record is read back through a node of the other region, each
// region's queue and retry specs live on its own cluster's servers, and
// when us-east's cluster goes, eu-west serves on and us-east work is
// refused, never moved.
func TestSuperclusterResidency(t *testing.T) {
	nodes := startSupercluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	regionOf := map[string]string{}
	for _, n := range nodes {
		regionOf[n.name] = n.region
	}
	counts := map[string]int{}
	for _, api := range nodes {
		reader := nodes[2] // a node of the other region
		if api.region == "us-east" {
			reader = nodes[0]
		}
		for _, tenant := range []string{"alice", "eve", "sam"} {
			for _, req := range requests {
				where, err := placeChecked(ctx, api, tenant, req, reader, regionOf)
				if err != nil {
					t.Error(err)
				}
				counts[where]++
			}
		}
	}
	t.Logf("placements: %v", counts)
	if counts["eu-west"] == 0 || counts["us-east"] == 0 || counts["refused"] == 0 {
		t.Fatalf("the table should run in both regions and refuse some: %v", counts)
	}

	// An idempotent invocation into each region from the other keeps its
	// spec there, for a retry.
	for _, c := range []struct {
		api    *testNode
		region string
	}{{nodes[0], "us-east"}, {nodes[2], "eu-west"}} {
		inv := command()
		inv.Idempotent = true
		inv.Policy.Residency = sandbox.Residency{Regions: []string{c.region}}
		if rec, err := c.api.client("alice").Submit(ctx, inv, 30*time.Second); err != nil || rec.State != client.StateDone || rec.Region != c.region {
			t.Fatalf("idempotent into %s via %s: %+v %v", c.region, c.api.name, rec, err)
		}
	}

	// Each region's queue and specs are on that region's NATS cluster.
	js := jetStreamAt(t, nodes[0].nats.ClientURL())
	where := map[string]string{}
	for _, region := range []string{"eu-west", "us-east"} {
		for _, name := range []string{"WOVYR_WORK_", "KV_WOVYR_SPECS_", "KV_wovyr-nodes-", "KV_wovyr-placements-"} {
			where[name+region] = region
		}
	}
	for _, name := range slices.Sorted(maps.Keys(where)) {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		if c := s.CachedInfo().Cluster; c == nil || c.Name != where[name] {
			t.Errorf("stream %s is on cluster %+v, want %s's", name, c, where[name])
		}
	}

	// us-east's whole cluster goes (its only server, with its node): eu-west
	// keeps serving, us-east work is refused there, never moved.
	nodes[2].stop()
	for slices.Contains(nodes[0].node.LiveRegions(), "us-east") {
		if ctx.Err() != nil {
			t.Fatal("us-1 still live")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var ce *client.Error
	_, err := nodes[1].client("sam").Submit(ctx, command(), 0)
	want := "residency-unmet: no live node in the allowed regions [us-east] (live regions: [eu-west]); refused, not placed elsewhere"
	if !errors.As(err, &ce) || ce.Status != 409 || ce.Message != want {
		t.Fatalf("us-east gone: got %v, want 409 %s", err, want)
	}
	for _, api := range nodes[:2] {
		if rec, err := api.client("eve").Submit(ctx, command(), 30*time.Second); err != nil || rec.State != client.StateDone || rec.Region != "eu-west" {
			t.Fatalf("eu-west work via %s with us-east gone: %+v %v", api.name, rec, err)
		}
	}
}
