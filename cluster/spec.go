package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wovyr/wovyr/sandbox"
)

// An idempotent invocation's spec — its argv, env, stdin and files — is
// its tenant's data, so it is kept where the rest of it is: in a key-value
// bucket of its region's (WOVYR_SPECS_<region>), pinned to the NATS
// servers tagged region:<region> as the region's queue is (inRegion), and
// never in the cluster-wide placements bucket, which every region's servers
// hold. The placement says only that a spec is kept (Retry). The spec is
// removed when the invocation ends, and expires with the placements'
// retention in any case.

// specsBucket names a region's bucket of specs.
func specsBucket(region string) string { return "WOVYR_SPECS_" + region }

// specs returns region's bucket of specs, creating it where missing.
func (n *Node) specs(ctx context.Context, region string) (jetstream.KeyValue, error) {
	n.mu.Lock()
	kv := n.specKV[region]
	n.mu.Unlock()
	if kv != nil {
		return kv, nil
	}
	cfg := jetstream.KeyValueConfig{Bucket: specsBucket(region), History: 1, TTL: n.o.Retention,
		Description: "wovyr: the idempotent invocations of region " + region + ", kept for their retry",
		Storage:     jetstream.FileStorage, Replicas: n.o.Replicas}
	err := n.inRegion(ctx, region, "bucket "+cfg.Bucket, func(ctx context.Context, pl *jetstream.Placement) error {
		cfg.Placement = pl
		var err error
		kv, err = n.js.CreateOrUpdateKeyValue(ctx, cfg)
		return err
	})
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	if n.specKV == nil {
		n.specKV = map[string]jetstream.KeyValue{}
	}
	n.specKV[region] = kv
	n.mu.Unlock()
	return kv, nil
}

// keepSpec keeps inv's spec in its region for a retry, if it is idempotent,
// and reports whether it did; encoded is inv as JSON where the caller has
// it.
func (n *Node) keepSpec(ctx context.Context, region string, inv *sandbox.Invocation, encoded []byte) (bool, error) {
	spec := retrySpec(inv, encoded)
	if spec == nil {
		return false, nil
	}
	kv, err := n.specs(ctx, region)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := kv.Put(ctx, inv.ID, spec); err != nil {
		return false, fmt.Errorf("cluster: keep the spec of %s in region %s: %w", inv.ID, region, err)
	}
	return true, nil
}

// spec reads the kept spec of id in region (nil: none is kept).
func (n *Node) spec(ctx context.Context, region, id string) ([]byte, error) {
	kv, err := n.specs(ctx, region)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return e.Value(), nil
}

// dropSpec removes the kept spec of id in region: it ended.
func (n *Node) dropSpec(ctx context.Context, region, id string) {
	kv, err := n.specs(ctx, region)
	if err == nil {
		err = kv.Purge(ctx, id)
	}
	if err != nil {
		n.log.Warn("cluster: cannot remove an ended invocation's kept spec (it expires with the retention)", "id", id, "region", region, "err", err)
	}
}

// inRegion runs create, which makes a stream (a bucket is one) for region
// with the placement it is given, pinned to the NATS servers tagged
// region:<region>. Where the NATS has fewer such servers than Replicas — a
// three-server NATS across two regions has at most two in one of them, and
// a stream of two stops with either — it places it on any servers instead,
// with a warning, unless the deployment requires pinning
// (Options.PinQueues): then it fails rather than keep the region's data
// outside it.
func (n *Node) inRegion(ctx context.Context, region, what string, create func(context.Context, *jetstream.Placement) error) error {
	tag := "region:" + region
	var unplaceable error
	try := func(pl *jetstream.Placement) error {
		return retry(ctx, func(ctx context.Context) error {
			err := create(ctx, pl)
			var api *jetstream.APIError
			if errors.As(err, &api) && (api.ErrorCode == jsNoPeers || api.ErrorCode == jsInsufficient) {
				unplaceable = err // not passing: no retry
				return nil
			}
			return err
		})
	}
	if err := try(&jetstream.Placement{Tags: []string{tag}}); err != nil {
		return fmt.Errorf("cluster: %s: %w", what, err)
	}
	if unplaceable == nil {
		return nil
	}
	if n.o.PinQueues {
		return fmt.Errorf("cluster: %s: region %s's data must live on NATS servers tagged %s, and the NATS has too few for %d replicas: %w",
			what, region, tag, n.o.Replicas, unplaceable)
	}
	n.log.Warn("cluster: region's data not pinned to its region's NATS servers", "what", what, "tag", tag,
		"replicas", n.o.Replicas, "error", unplaceable)
	unplaceable = nil
	if err := try(nil); err != nil || unplaceable != nil {
		return fmt.Errorf("cluster: %s: %w", what, errors.Join(err, unplaceable))
	}
	return nil
}
