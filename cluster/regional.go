package cluster

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wovyr/wovyr/sandbox"
)

// Each region keeps its own registry (wovyr-nodes-<region>) and placements
// (wovyr-placements-<region>) buckets, placed on its NATS servers like its
// work stream: in a supercluster of a NATS cluster per region, losing one
// region's cluster leaves every other region its registry and its records
// (ADR 0031). A node writes only its own region's buckets; it reads every
// region's registry, and looks an invocation's placement up in its own
// region's bucket first, then in the others. The other regions are found
// by their buckets (discoverRegions), not configured: a node told of too
// few regions would otherwise split the cluster.

func nodesBucket(region string) string      { return "wovyr-nodes-" + bucketRegion(region) }
func placementsBucket(region string) string { return "wovyr-placements-" + bucketRegion(region) }

// bucketRegion names a node without a region's buckets "_", which no
// region can be called.
func bucketRegion(region string) string {
	if region == "" {
		return "_"
	}
	return region
}

// openRegionBuckets opens this node's own region's registry and
// placements buckets, creating them, placed in the region, where missing.
// One that exists is opened as it is: a node's settings (replicas,
// pinning) do not remake what the region's first node made.
func (n *Node) openRegionBuckets(ctx context.Context) error {
	create := func(cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
		var kv jetstream.KeyValue
		err := retry(ctx, func(ctx context.Context) error {
			var err error
			if kv, err = n.js.KeyValue(ctx, cfg.Bucket); errors.Is(err, jetstream.ErrBucketNotFound) {
				return nil
			}
			return err
		})
		if err != nil || kv != nil {
			return kv, err
		}
		place := func(ctx context.Context, pl *jetstream.Placement) error {
			cfg.Placement = pl
			var err error
			kv, err = n.js.CreateOrUpdateKeyValue(ctx, cfg)
			return err
		}
		if n.o.Region == "" { // no region's servers to pin it to
			return kv, retry(ctx, func(ctx context.Context) error { return place(ctx, nil) })
		}
		return kv, n.inRegion(ctx, n.o.Region, "bucket "+cfg.Bucket, place)
	}
	var err error
	n.nodes, err = create(jetstream.KeyValueConfig{Bucket: nodesBucket(n.o.Region),
		Description: "wovyr nodes of one region: one entry per live node, renewed every heartbeat", History: 1,
		TTL: 3 * n.o.Heartbeat, Storage: jetstream.MemoryStorage, Replicas: n.o.Replicas})
	if err != nil {
		return err
	}
	n.places, err = create(jetstream.KeyValueConfig{Bucket: placementsBucket(n.o.Region),
		Description: "wovyr placements of one region's invocations: id → the node that holds its record", History: 1,
		TTL: n.o.Retention, Storage: jetstream.FileStorage, Replicas: n.o.Replicas})
	return err
}

// regions are the regions whose buckets this node reads: its own first,
// then the others it has found (discoverRegions), sorted.
func (n *Node) regions() []string {
	n.mu.Lock()
	others := slices.Sorted(maps.Keys(n.known))
	n.mu.Unlock()
	return append([]string{n.o.Region}, others...)
}

// placesIn is region's placements bucket; nil (no error) while it does
// not exist: no node of the region has started.
func (n *Node) placesIn(ctx context.Context, region string) (jetstream.KeyValue, error) {
	if region == n.o.Region {
		return n.places, nil
	}
	n.mu.Lock()
	kv := n.placeKV[region]
	n.mu.Unlock()
	if kv != nil {
		return kv, nil
	}
	kv, err := n.js.KeyValue(ctx, placementsBucket(region))
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, sandbox.Wrap(unavailable, err, "region %s's placements are unreachable", region)
	}
	n.mu.Lock()
	if n.placeKV == nil {
		n.placeKV = map[string]jetstream.KeyValue{}
	}
	n.placeKV[region] = kv
	n.mu.Unlock()
	return kv, nil
}

// discoverRegions finds the other regions' registries (a bucket each,
// made by the region's first node) and adds each to the view
// (registry.watch), which keeps it there until the registry closes. Run
// once at Connect, so that a node serves knowing the regions there are,
// then every second while ctx lasts, for regions that start later.
func (n *Node) discoverRegions(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, max(n.reg.ttl, time.Second))
	defer cancel()
	for name := range n.js.KeyValueStoreNames(lctx).Name() {
		region, ok := strings.CutPrefix(name, "wovyr-nodes-")
		if !ok || name == nodesBucket(n.o.Region) {
			continue
		}
		if region == bucketRegion("") {
			region = ""
		}
		n.mu.Lock()
		seen := n.known[region]
		n.mu.Unlock()
		if seen {
			continue
		}
		kv, err := n.js.KeyValue(lctx, name)
		if err == nil {
			err = n.reg.watch(lctx, kv)
		}
		if err != nil {
			continue // its cluster unreachable now: next round
		}
		n.mu.Lock()
		if n.known == nil {
			n.known = map[string]bool{}
		}
		n.known[region] = true
		n.mu.Unlock()
	}
}

// keepDiscovering runs discoverRegions every second until ctx ends.
func (n *Node) keepDiscovering(ctx context.Context) {
	n.reg.wg.Go(func() { every(ctx, time.Second, func() { n.discoverRegions(ctx) }) })
}
