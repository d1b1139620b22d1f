package cluster_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/cluster"
	"github.com/wovyr/wovyr/sandbox"
)

// TestRegionQueuesStayInRegion: each region's queue (its stream, which
// holds queued invocations with their stdin and files) lives on the NATS
// servers of that region: us-east's on us-1's server alone, eu-west's on
// eu-1's or eu-2's. A node that requires pinning where the NATS has too
// few of its region's servers for the replicas it asks serves no queue and
// says why, rather than placing one outside its region. An idempotent
// invocation's spec, kept for its retry, is held the same way.
func TestRegionQueuesStayInRegion(t *testing.T) {
	nodes := startCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js := jetStreamAt(t, nodes[0].nats.ClientURL())
	for region, servers := range map[string][]string{"us-east": {"us-1"}, "eu-west": {"eu-1", "eu-2"}} {
		st, err := js.Stream(ctx, "WOVYR_WORK_"+region)
		if err != nil {
			t.Fatalf("%s: %v", region, err)
		}
		info, err := st.Info(ctx)
		if err != nil || info.Cluster == nil {
			t.Fatalf("%s: %+v %v", region, info, err)
		}
		if !slices.Contains(servers, info.Cluster.Leader) || len(info.Cluster.Replicas) != 0 || info.Config.Placement == nil || info.Config.Placement.Tags[0] != "region:"+region {
			t.Fatalf("%s's queue on %q (replicas %v, placement %+v), want one of %v", region, info.Cluster.Leader, info.Cluster.Replicas, info.Config.Placement, servers)
		}
	}

	// An idempotent invocation's spec, kept for its retry, is its region's
	// data too: in the region's bucket, on its servers, never in the
	// placements every server holds; and gone when it ends.
	for region, servers := range map[string][]string{"us-east": {"us-1"}, "eu-west": {"eu-1", "eu-2"}} {
		from := map[string]*testNode{"us-east": nodes[0], "eu-west": nodes[2]}[region] // dispatched from the other region
		inv := &sandbox.Invocation{Idempotent: true, Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/sleep", "1"}},
			Policy: sandbox.Policy{Trust: sandbox.Trusted, Residency: sandbox.Residency{Regions: []string{region}}}}
		rec, err := from.client("alice").Submit(ctx, inv, 0)
		if err != nil {
			t.Fatalf("%s: %v", region, err)
		}
		specs, err := js.KeyValue(ctx, "WOVYR_SPECS_"+region)
		if err != nil {
			t.Fatalf("%s: %v", region, err)
		}
		if e, err := specs.Get(ctx, rec.ID); err != nil || !strings.Contains(string(e.Value()), `"/bin/sleep"`) {
			t.Fatalf("%s: the kept spec: %v", region, err)
		}
		st, err := js.Stream(ctx, "KV_WOVYR_SPECS_"+region)
		if err != nil {
			t.Fatal(err)
		}
		if info, err := st.Info(ctx); err != nil || !slices.Contains(servers, info.Cluster.Leader) || info.Config.Placement == nil {
			t.Fatalf("%s's specs on %+v (%v), want one of %v", region, info.Cluster, err, servers)
		}
		places, err := js.KeyValue(ctx, "wovyr-placements-"+region)
		if err != nil {
			t.Fatal(err)
		}
		if e, err := places.Get(ctx, rec.ID); err != nil || strings.Contains(string(e.Value()), "sleep") || !strings.Contains(string(e.Value()), `"retry":true`) {
			t.Fatalf("%s: the placement %s (%v) holds the spec, or does not say one is kept", region, e.Value(), err)
		}
		if end, err := from.client("alice").Get(ctx, rec.ID, 30*time.Second); err != nil || end.State != client.StateDone {
			t.Fatalf("%s: %+v %v", region, end, err)
		}
		// The node records the end in the background, after its answer.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			_, err := specs.Get(ctx, rec.ID)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the spec of an ended invocation is still kept: %v", region, err)
			}
		}
	}

	strict, err := cluster.Connect(ctx, cluster.Options{Name: "us-strict", Region: "us-east", URL: nodes[2].nats.ClientURL(),
		Heartbeat: 400 * time.Millisecond, Replicas: 3, PinQueues: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer strict.Close()
	err = strict.Serve(ctx, &acceptAll{})
	if err == nil || !strings.Contains(err.Error(), "region us-east's data must live on NATS servers tagged region:us-east, and the NATS has too few for 3 replicas") {
		t.Fatalf("a pinned queue of 3 replicas in a region of one server: %v", err)
	}
	// The region's queue is as it was.
	st, err := js.Stream(ctx, "WOVYR_WORK_us-east")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(ctx); err != nil || info.Cluster.Leader != "us-1" || info.Config.Replicas != 1 {
		t.Fatalf("us-east's queue after the refusal: %+v %v", info, err)
	}
}
