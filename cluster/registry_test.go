package cluster_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/cluster"
	"github.com/wovyr/wovyr/sandbox"
)

// TestStaleRegistryIsUnavailable: a node connected to NATS whose registry
// takes no heartbeat (here the bucket is gone; in TestClusterResidency a
// NATS server's restart) cannot know which nodes are live, so it refuses
// new work as unavailable (503, retried) rather than letting an empty
// live set read as residency-unmet (409).
func TestStaleRegistryIsUnavailable(t *testing.T) {
	ns, err := cluster.StartEmbedded(cluster.EmbeddedOptions{Name: "stale", Listen: "127.0.0.1:0", StoreDir: filepath.Join(t.TempDir(), "nats")})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const beat = 100 * time.Millisecond
	n, err := cluster.Connect(ctx, cluster.Options{Name: "solo", Region: "r1", URL: ns.ClientURL(), Heartbeat: beat, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); n.Serve(sctx, &acceptAll{}) }()
	defer func() { stop(); <-done; n.Close() }()
	for len(n.Live()) == 0 {
		if ctx.Err() != nil {
			t.Fatal("the node never registered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Control: heartbeats land, so the node takes work.
	time.Sleep(5 * beat)
	if err := n.Reachable(); err != nil {
		t.Fatalf("with its heartbeats landing: %v", err)
	}

	js := jetStreamAt(t, ns.ClientURL())
	if err := js.DeleteKeyValue(ctx, "wovyr-nodes-r1"); err != nil {
		t.Fatal(err)
	}
	for {
		err = n.Reachable()
		if err != nil || ctx.Err() != nil {
			break
		}
		time.Sleep(beat / 2)
	}
	var se *sandbox.Error
	if !errors.As(err, &se) || se.Class != "unavailable" || !strings.Contains(se.Msg, "has taken no heartbeat of this node for") {
		t.Fatalf("with the registry taking no heartbeat: %v, want unavailable naming the heartbeat", err)
	}
}
