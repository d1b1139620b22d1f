package cluster_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/cluster"
	"github.com/wovyr/wovyr/sandbox"
)

// TestClusterGPUDispatch: GPU work for another region goes to a node of
// that region with the devices it asks for, which assigns them as for a
// local submit; a region without such a node refuses it (409, naming the
// GPUs), never places it elsewhere or on a node that cannot hold it.
func TestClusterGPUDispatch(t *testing.T) {
	nodes := startNodes(t, []nodeSpec{{name: "eu-1", region: "eu-west"}, {name: "us-1", region: "us-east", gpus: 2}}, 1, nodeConfig,
		cluster.Options{Heartbeat: 400 * time.Millisecond, Capacity: 8})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	inv := func(gpus int64, region string) *sandbox.Invocation {
		v := command()
		v.Workload.Argv = []string{"/bin/sh", "-c", "echo $NVIDIA_VISIBLE_DEVICES"}
		v.Resources.GPU = gpus
		v.Policy.Residency = sandbox.Residency{Regions: []string{region}}
		return v
	}
	rec, err := nodes[0].client("alice").Submit(ctx, inv(1, "us-east"), 30*time.Second)
	if err != nil || rec.State != client.StateDone || rec.Node != "us-1" || !strings.HasPrefix(string(rec.Result.Stdout), "GPU-") || strings.Contains(string(rec.Result.Stdout), ",") {
		t.Fatalf("GPU work dispatched to us-east: %+v %+v %v", rec, rec.Result, err)
	}
	var ce *client.Error
	for _, tc := range []struct {
		api     *testNode
		gpus    int64
		region  string
		message string
	}{
		{nodes[0], 3, "us-east", "floor-unmet (resources.gpu): no live node of region us-east has 3 matching GPUs and a certified backend at or above native for a command workload"},
		{nodes[1], 1, "eu-west", "floor-unmet (resources.gpu): no live node of region eu-west has 1 matching GPUs and a certified backend at or above native for a command workload"},
	} {
		_, err := tc.api.client("alice").Submit(ctx, inv(tc.gpus, tc.region), 0)
		if !errors.As(err, &ce) || ce.Status != 409 || ce.Message != tc.message {
			t.Fatalf("%d GPUs in %s through %s: %v, want 409 %s", tc.gpus, tc.region, tc.api.name, err, tc.message)
		}
	}
}
