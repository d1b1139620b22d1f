package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/cluster"
	"github.com/wovyr/wovyr/sandbox"
)

// TestCertificationFollowed: a node's certified backends are read every
// heartbeat, not once: when us-1's native certification fails, work for
// us-east is refused (409, no node certified for it) instead of being
// taken by a node that would refuse it, and once it passes again the same
// work runs there.
func TestCertificationFollowed(t *testing.T) {
	nodes := startNodes(t, []nodeSpec{{name: "eu-1", region: "eu-west"}, {name: "us-1", region: "us-east"}}, 1, nodeConfig,
		cluster.Options{Heartbeat: 400 * time.Millisecond, Capacity: 8})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	us, alice := nodes[1], nodes[0].client("alice")
	inv := func() *sandbox.Invocation {
		v := command()
		v.Policy.Residency = sandbox.Residency{Regions: []string{"us-east"}}
		return v
	}
	if rec, err := alice.Submit(ctx, inv(), 30*time.Second); err != nil || rec.State != client.StateDone || rec.Node != "us-1" {
		t.Fatalf("certified: %+v %v", rec, err)
	}
	certs, err := us.store.Certs()
	if err != nil || len(certs) != 1 {
		t.Fatalf("us-1's certifications: %v %v", certs, err)
	}
	good := certs[0]
	bad := good
	bad.Passed = false
	if err := us.store.PutCert(bad); err != nil {
		t.Fatal(err)
	}
	want := "floor-unmet: no live node of region us-east has a certified backend at or above native for a command workload"
	var ce *client.Error
	for {
		_, err := alice.Submit(ctx, inv(), 30*time.Second)
		if errors.As(err, &ce) && ce.Status == 409 && ce.Message == want {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("after us-1's certification failed: %v, want 409 %s", err, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := us.store.PutCert(good); err != nil {
		t.Fatal(err)
	}
	for {
		rec, err := alice.Submit(ctx, inv(), 30*time.Second)
		if err == nil && rec.State == client.StateDone && rec.Node == "us-1" {
			break
		}
		if ctx.Err() != nil || (err != nil && !errors.As(err, &ce)) || (err == nil && rec.State != client.StateDone) {
			t.Fatalf("after us-1's certification passed again: %+v %v", rec, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
