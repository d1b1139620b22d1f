package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// Prefixes of the cluster's subjects (the buckets: regional.go).
const (
	workPrefix = "wovyr.work."
	nodePrefix = "wovyr.node."
)

// Options configure a Node. Every zero field is documented.
type Options struct {
	// Name is the node's name in the registry; unique in the cluster.
	Name string
	// Region and Zone are the node's (operator config). A node without a
	// region takes no dispatched work.
	Region, Zone string
	// URL is the NATS to connect to (an embedded server's ClientURL or an
	// external one).
	URL string
	// Heartbeat is how often the registry entry is renewed; an entry older
	// than 3 heartbeats is not live. Zero means 1s.
	Heartbeat time.Duration
	// AcceptTimeout bounds how long Dispatch waits for a node of the
	// region to take an invocation (claim and record it) before it answers
	// with the queued record. Zero means 5s.
	AcceptTimeout time.Duration
	// QueueTimeout bounds how long a dispatched invocation waits in its
	// region's queue for a node with room; past it, it ends failed
	// (unavailable). Zero means 10m.
	QueueTimeout time.Duration
	// Retention is how long a placement (id → node) is kept for GET.
	// Zero means 24h.
	Retention time.Duration
	// Replicas is how many NATS servers hold each stream and bucket: 3 in
	// a NATS cluster of three or more keeps the cluster serving when one
	// server stops. Zero means 1.
	Replicas int
	// PinQueues requires the region's queue to live on NATS servers tagged
	// region:<Region>; false places it elsewhere, with a warning, where
	// the NATS has too few of them for Replicas.
	PinQueues bool
	// Capacity is what the node advertises it can run at once.
	Capacity int
	// Required is the strength an invocation's policy requires on this
	// deployment (manager.Manager.Required). Nil means the trust class's
	// default floor.
	Required func(sandbox.Policy) sandbox.Strength
	// Logger receives the node's logs. Nil means slog.Default().
	Logger *slog.Logger
}

// Backend is one backend a node certified and offers.
type Backend struct {
	Name     string                 `json:"name"`
	Strength sandbox.Strength       `json:"strength"`
	Kinds    []sandbox.WorkloadKind `json:"kinds"`
}

// GPU is one of a node's GPU devices (or MIG instances) in its registry
// entry: what a GPU request is matched against.
type GPU struct {
	MIGProfile  string `json:"mig_profile,omitempty"`
	MemoryBytes int64  `json:"memory_bytes"`
}

// Executor is what a node runs dispatched work with: the server's normal
// path (package server's *Server).
type Executor interface {
	// Accept records inv durably as queued (admission, selection and the
	// store, as for a local submit) and returns the record.
	Accept(ctx context.Context, inv *sandbox.Invocation) (store.Invocation, error)
	// Record returns the tenant's record id, waiting up to wait for it to
	// end; store.ErrNotFound for another tenant's.
	Record(ctx context.Context, tenant, id string, wait time.Duration) (store.Invocation, error)
	// Certified lists the backends available and certified here.
	Certified(ctx context.Context) []Backend
	// Cancel cancels the tenant's record id and returns it ended; a
	// Conflict if it had already ended, store.ErrNotFound for another
	// tenant's.
	Cancel(ctx context.Context, tenant, id string) (store.Invocation, error)
	// Follow returns the tenant's record id and its live chunks past the
	// first have, waiting up to wait for the record's state to differ
	// from state or for more chunks; store.ErrNotFound for another
	// tenant's.
	Follow(ctx context.Context, tenant, id string, state store.State, have int, wait time.Duration) (store.Invocation, []sandbox.Chunk, error)
	// Room is how many more invocations the node takes from its region's
	// queue now (zero or less: none until Node.Freed).
	Room() int
	// GPUs are the node's GPU devices (none: it takes no GPU work).
	GPUs() []GPU
	// Weights are the tenants the node serves and their weights: whose
	// work it pulls, and in what proportion.
	Weights() map[string]int
}

// Node is this daemon in its cluster. Create it with Connect, start taking
// work with Serve, and Close it.
type Node struct {
	o      Options
	log    *slog.Logger
	nc     *nats.Conn
	js     jetstream.JetStream
	nodes  jetstream.KeyValue // this region's registry (regional.go)
	places jetstream.KeyValue // this region's placements
	reg    *registry

	mu      sync.Mutex
	serving bool
	specKV  map[string]jetstream.KeyValue // by region (spec.go)
	placeKV map[string]jetstream.KeyValue // other regions' placements, by region
	known   map[string]bool               // the other regions whose registries the view has
	// room is poked when the executor may have room again (Freed).
	room chan struct{}
	// beat is when this node's last heartbeat was written (UnixNano; 0
	// before Serve): while it is older than the registry's ttl, the
	// registry takes no writes, so no node's entry in it can be trusted.
	beat atomic.Int64
}

// Connect connects to NATS and opens (creating where missing) the
// registry and placement buckets. It retries while JetStream is not yet
// ready (a NATS cluster electing its leader) until ctx ends.
func Connect(ctx context.Context, o Options) (*Node, error) {
	if o.Name == "" || !sandbox.ValidRegion(o.Name) {
		return nil, fmt.Errorf("cluster: node name %q must match %s", o.Name, sandbox.RegionRE)
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = time.Second
	}
	if o.AcceptTimeout <= 0 {
		o.AcceptTimeout = 5 * time.Second
	}
	if o.QueueTimeout <= 0 {
		o.QueueTimeout = 10 * time.Minute
	}
	if o.Retention <= 0 {
		o.Retention = 24 * time.Hour
	}
	o.Replicas = max(o.Replicas, 1)
	n := &Node{o: o, log: o.Logger, room: make(chan struct{}, 1)}
	if n.log == nil {
		n.log = slog.Default()
	}
	n.log = n.log.With("node", o.Name)
	nc, err := nats.Connect(o.URL, nats.Name("wovyr "+o.Name), nats.MaxReconnects(-1),
		nats.ReconnectWait(200*time.Millisecond), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("cluster: connect: %w", err)
	}
	n.nc = nc
	if n.js, err = jetstream.New(nc); err != nil {
		nc.Close()
		return nil, fmt.Errorf("cluster: jetstream: %w", err)
	}
	if err := n.openRegionBuckets(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("cluster: buckets: %w", err)
	}
	n.reg = newRegistry(ctx, 3*o.Heartbeat, n.log)
	if err := n.reg.watch(ctx, n.nodes); err != nil {
		n.reg.close()
		nc.Close()
		return nil, err
	}
	n.discoverRegions(ctx)
	n.keepDiscovering(n.reg.ctx)
	return n, nil
}

// Serve registers the node and takes its region's work for the backends
// ex certified, until ctx ends; then it stops taking work, deregisters and
// returns. Work already taken goes on in ex.
func (n *Node) Serve(ctx context.Context, ex Executor) error {
	n.mu.Lock()
	if n.serving {
		n.mu.Unlock()
		return errors.New("cluster: Serve called twice")
	}
	n.serving = true
	n.mu.Unlock()
	backends := ex.Certified(ctx)
	// The requests other nodes make of the records this node holds.
	for verb, handle := range map[string]func(context.Context, Executor, *nats.Msg){
		"get": n.answerGet, "cancel": n.answerCancel, "follow": n.answerFollow, "part": n.answerPart,
	} {
		sub, err := n.nc.Subscribe(nodePrefix+n.o.Name+"."+verb, func(m *nats.Msg) { go handle(ctx, ex, m) })
		if err != nil {
			return fmt.Errorf("cluster: subscribe: %w", err)
		}
		defer sub.Unsubscribe()
	}
	var stops []func()
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	var pull *puller
	var err error
	if n.o.Region != "" {
		if pull, stops, err = n.consume(ctx, ex, backends); err != nil {
			return err
		}
	}
	info := Info{Name: n.o.Name, Region: n.o.Region, Zone: n.o.Zone, Backends: backends, GPUs: ex.GPUs(), Capacity: n.o.Capacity, Started: time.Now()}
	if err := n.heartbeat(ctx, info); err != nil {
		return err
	}
	n.log.Info("cluster node serving", "region", n.o.Region, "backends", len(backends))
	t := time.NewTicker(n.o.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// Deregister first, so dispatchers stop choosing this node,
			// then stop the consumers (deferred).
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = n.nodes.Delete(dctx, n.o.Name)
			cancel()
			return nil
		case <-t.C:
			// A backend certified or decertified meanwhile (wovyr certify,
			// a changed capability) shows in the next beat, and the node
			// pulls accordingly.
			if now := ex.Certified(ctx); !slices.EqualFunc(now, info.Backends, sameBackend) {
				n.log.Info("cluster: certified backends changed", "backends", len(now))
				info.Backends = now
				if pull != nil {
					pull.certified(now)
				}
			}
			if err := n.heartbeat(ctx, info); err != nil && ctx.Err() == nil {
				n.log.Warn("cluster heartbeat", "error", err)
			}
		}
	}
}

func sameBackend(a, b Backend) bool {
	return a.Name == b.Name && a.Strength == b.Strength && slices.Equal(a.Kinds, b.Kinds)
}

func (n *Node) heartbeat(ctx context.Context, info Info) error {
	info.Seen = time.Now()
	b, err := encode(info)
	if err != nil {
		return err
	}
	// A write slower than one beat (a loaded machine, a stream electing
	// its leader) still counts while the entry would be live: up to the
	// registry's ttl. Ticks meanwhile are dropped, not queued.
	hctx, cancel := context.WithTimeout(ctx, 3*n.o.Heartbeat)
	defer cancel()
	if _, err = n.nodes.Put(hctx, n.o.Name, b); err == nil {
		n.beat.Store(info.Seen.UnixNano())
	}
	return err
}

// Reachable is nil while the node is connected to NATS, else an
// unavailable error: without NATS it cannot know which regions are live,
// publish, or record where its work is, so it takes no new work.
//
// Connected is not enough: while a NATS cluster recovers (a server
// restarted, its streams electing leaders) the registry may take no
// writes for longer than an entry lives, and every node, this one
// included, then looks dead to every other. A region "without a live
// node" would be refused as residency-unmet (409), a permanent-sounding
// answer to a passing fault; so while this node's own heartbeat is
// older than an entry lives, its view is stale and it answers unavailable.
// So it does while its view does not hold this node itself, heartbeat
// written or not: the view is behind the registry (its watch broken by
// the recovery, its next read not yet come).
func (n *Node) Reachable() error {
	if n.nc.Status() != nats.CONNECTED {
		return sandbox.Errorf(unavailable, "", "the cluster is unreachable from this node (NATS %s); retry", strings.ToLower(n.nc.Status().String()))
	}
	if t := n.beat.Load(); t != 0 {
		if age := time.Since(time.Unix(0, t)); age > n.reg.ttl {
			return sandbox.Errorf(unavailable, "", "the cluster's node registry has taken no heartbeat of this node for %s, so which nodes are live is unknown; retry", age.Round(time.Millisecond))
		}
		if !n.reg.isLive(n.o.Name, time.Now()) {
			return sandbox.Errorf(unavailable, "", "this node's view of the node registry does not hold this node yet, so which nodes are live is unknown; retry")
		}
	}
	return nil
}

// Freed tells the node that its executor ended an invocation, so it may
// have room to pull the next one from the region's queue.
func (n *Node) Freed() {
	select {
	case n.room <- struct{}{}:
	default:
	}
}

// Peers is how many live nodes region has now.
func (n *Node) Peers(region string) int {
	k := 0
	for _, in := range n.Live() {
		if in.Region == region {
			k++
		}
	}
	return k
}

// LiveRegions are the regions with a live node now, sorted.
func (n *Node) LiveRegions() []string { return n.reg.liveRegions(time.Now()) }

// Live is every live node's registry entry, by name.
func (n *Node) Live() []Info { return n.reg.live(time.Now()) }

// Close disconnects. Call it after Serve has returned.
func (n *Node) Close() {
	n.reg.close()
	n.nc.Close()
}

// retry runs fn until it succeeds or ctx ends, backing off from 50ms:
// JetStream answers "temporarily unavailable" while a NATS cluster elects
// its meta leader.
func retry(ctx context.Context, fn func(context.Context) error) error {
	wait := 50 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := fn(actx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}
