package cluster_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/cluster"
	"github.com/wovyr/wovyr/sandbox"
)

// TestRecordLargerThanAMessage: over NATS servers that carry at most
// 1 MiB a message, a record with 3 MiB of stdout and 1.5 MiB of stderr is
// answered whole through a node that does not hold it — the dispatch's
// wait, a later GET and the event stream's final record — its output
// fetched from the holder in parts.
func TestRecordLargerThanAMessage(t *testing.T) {
	nodes := startNodes(t, []nodeSpec{{name: "eu-1", region: "eu-west", maxPayload: 1 << 20}, {name: "us-1", region: "us-east", maxPayload: 1 << 20}}, 1, nodeConfig,
		cluster.Options{Heartbeat: 400 * time.Millisecond, Capacity: 8})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	inv := command()
	inv.Workload.Argv = []string{"/bin/sh", "-c", "head -c 3145728 /dev/zero | tr '\\0' a; head -c 1572864 /dev/zero | tr '\\0' b >&2"}
	inv.Limits.Output = 8 << 20
	inv.Policy.Residency = sandbox.Residency{Regions: []string{"us-east"}}
	wantOut, wantErr := bytes.Repeat([]byte("a"), 3<<20), bytes.Repeat([]byte("b"), 3<<19)
	same := func(what string, rec *client.Invocation) {
		t.Helper()
		if rec.Result == nil {
			t.Fatalf("%s: %s on %s, no result", what, rec.State, rec.Node)
		}
		if rec.State != client.StateDone || rec.Node != "us-1" || !bytes.Equal(rec.Result.Stdout, wantOut) || !bytes.Equal(rec.Result.Stderr, wantErr) {
			t.Fatalf("%s: %s on %s, %d bytes of stdout, %d of stderr", what, rec.State, rec.Node, len(rec.Result.Stdout), len(rec.Result.Stderr))
		}
	}
	alice := nodes[0].client("alice")
	rec, err := alice.Submit(ctx, inv, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	same("the dispatch's wait", rec)
	got, err := alice.Get(ctx, rec.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	same("a GET through eu-1", got)
	var final *client.Invocation
	if err := alice.Events(ctx, rec.ID, func(ev client.Event) error {
		if ev.Type == client.EventResult {
			final = ev.Invocation
		}
		return nil
	}); err != nil || final == nil {
		t.Fatalf("events through eu-1: %v (result %v)", err, final != nil)
	}
	same("the event stream's result through eu-1", final)
}
