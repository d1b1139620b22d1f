package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// placement is a wovyr-placements entry: who holds the record, for whom,
// and what the cluster knows of its end.
type placement struct {
	Node       string    `json:"node"`
	Region     string    `json:"region,omitempty"`
	Tenant     string    `json:"tenant"`
	SpecDigest string    `json:"spec_digest,omitempty"`
	Created    time.Time `json:"created"`
	// State is set when the holder recorded the end (Ended).
	State store.State `json:"state,omitempty"`
	// Lost is why the cluster gave the invocation up: its node stopped
	// answering before it ended. Final: once set, every node answers lost.
	Lost   string    `json:"lost,omitempty"`
	LostAt time.Time `json:"lost_at,omitzero"`
	// Retry says the invocation is idempotent and its spec is kept in its
	// region (spec.go), so that a node of the region can run it again if
	// its node is lost (retry.go).
	Retry bool `json:"retry,omitempty"`
	// Spec is the invocation itself, as nodes before the region-held specs
	// kept it here; read, never written.
	Spec json.RawMessage `json:"spec,omitempty"`
	// Attempt is 2 once the cluster retried it (it does so once), after
	// the first attempt was lost with node FirstNode; Node is empty while
	// the retry waits for a taker.
	Attempt   int       `json:"attempt,omitempty"`
	FirstNode string    `json:"first_node,omitempty"`
	RetriedAt time.Time `json:"retried_at,omitzero"`
	// Expires is when a dispatched invocation that no node has taken
	// stops waiting in its region's queue.
	Expires time.Time `json:"expires,omitzero"`
	// Refusal is why it ended without running: its node refused it, it
	// was cancelled in the queue, or no node took it before Expires.
	// Final, like Lost.
	Refusal *refusal `json:"refusal,omitempty"`
}

// refusal is a typed end without a run.
type refusal struct {
	Class   sandbox.Class `json:"class"`
	Message string        `json:"message"`
	Field   string        `json:"field,omitempty"`
	At      time.Time     `json:"at"`
}

// waiting reports whether the invocation is in its region's queue: no node
// holds it and it has not ended.
func (p *placement) waiting() bool { return p.Node == "" && p.Lost == "" && p.Refusal == nil }

// newPlacement is inv's placement on node ("": waiting in region's
// queue until expires), created then, with its spec kept in the region
// for a retry if it is idempotent (keepSpec); encoded is inv as JSON where
// the caller has it.
func (n *Node) newPlacement(ctx context.Context, inv *sandbox.Invocation, encoded []byte, node, region string, created, expires time.Time) (placement, error) {
	kept, err := n.keepSpec(ctx, region, inv, encoded)
	return placement{Node: node, Region: region, Tenant: inv.Tenant, SpecDigest: store.Digest(inv),
		Created: created, Expires: expires, Retry: kept}, err
}

// lostReason is a placement's Lost for a node that left mid-invocation.
func lostReason(node string) string {
	return "node-lost: node " + node + " stopped answering while it ran"
}

// Placed records that this node holds inv's record, created then (a
// local submit).
func (n *Node) Placed(ctx context.Context, inv *sandbox.Invocation, created time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	p, err := n.newPlacement(ctx, inv, nil, n.o.Name, n.o.Region, created, time.Time{})
	if err != nil {
		return err
	}
	pl, _ := json.Marshal(p)
	_, err = n.places.Create(ctx, inv.ID, pl)
	return err
}

// Ended records in the placement that the record id ended in st, so that
// a node that then dies is not taken to have died mid-invocation.
func (n *Node) Ended(ctx context.Context, id string, st store.State) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	kept := false
	err := n.updatePlacement(ctx, id, func(pl *placement) bool {
		if pl.Lost != "" || pl.Node != n.o.Name {
			return false
		}
		pl.State, kept = st, pl.Retry
		return true
	})
	if err == nil && kept && st.Terminal() { // no retry now: the spec goes
		n.dropSpec(ctx, n.o.Region, id)
	}
	return err
}

// Get returns the tenant's record id from the node that holds it. A node
// that is no longer live and never recorded the end loses it: the
// placement is marked lost once, for good, and every node answers the
// same lost record.
func (n *Node) Get(ctx context.Context, tenant, id string, wait time.Duration) (store.Invocation, error) {
	pl, _, _, err := n.placement(ctx, id)
	if err != nil {
		return store.Invocation{}, err
	}
	if pl.Tenant != tenant {
		return store.Invocation{}, store.ErrNotFound // another tenant's: as missing
	}
	// While it waits in the queue, a wait waits for a node to take it.
	until := time.Now().Add(wait)
	for pl.waiting() && pl.Attempt == 0 && time.Now().Before(until) && time.Now().Before(pl.Expires) {
		select {
		case <-ctx.Done():
			return store.Invocation{}, ctx.Err()
		case <-time.After(min(queuePoll, time.Until(until))):
		}
		if pl, _, _, err = n.placement(ctx, id); err != nil {
			return store.Invocation{}, err
		}
	}
	switch {
	case pl.Lost != "" || pl.Refusal != nil:
		return recordOf(id, pl), nil
	case pl.Node == "" && pl.Attempt == 2:
		return n.retryPending(ctx, id, pl)
	case pl.Node == "":
		if time.Now().After(pl.Expires.Add(expireGrace)) {
			// Its deadline passed and no node ended it (none pulled it):
			// it ends here, once, for every node to answer the same.
			return n.expire(ctx, id), nil
		}
		return queuedRecord(id, pl), nil
	}
	rec, err := n.ask(ctx, pl.Node, getRequest{Tenant: tenant, ID: id, Wait: max(time.Until(until), 0)})
	for k := 0; errors.Is(err, store.ErrNotFound) && k < acceptPolls; k++ {
		// The holder claimed it and is recording it (or refusing it): a
		// claim comes before the record. Ask again.
		select {
		case <-ctx.Done():
			return store.Invocation{}, ctx.Err()
		case <-time.After(queuePoll):
		}
		if pl, _, _, err = n.placement(ctx, id); err != nil {
			return store.Invocation{}, err
		}
		if pl.Refusal != nil {
			return refusedRecord(id, pl), nil
		}
		rec, err = n.ask(ctx, pl.Node, getRequest{Tenant: tenant, ID: id, Wait: max(time.Until(until), 0)})
	}
	if err == nil || errors.Is(err, store.ErrNotFound) || n.isLive(pl.Node) {
		return rec, err
	}
	if pl.State.Terminal() {
		return store.Invocation{}, sandbox.Errorf(unavailable, "", "invocation %s ended (%s) on node %s, which is not live now; its record is there", id, pl.State, pl.Node)
	}
	if (pl.Retry || pl.Spec != nil) && pl.Attempt == 0 {
		return n.retry(ctx, id, pl)
	}
	return n.markLost(ctx, id, pl.Node, lostReason(pl.Node))
}

// queuePoll is how often a wait on a queued invocation looks again.
const queuePoll = 50 * time.Millisecond

// acceptPolls bounds how many times (queuePoll apart) a holder that has
// claimed an invocation is asked again for a record it has not written yet.
const acceptPolls = 100

// expireGrace is how long past its deadline a queued invocation's node
// may still be recording that it took it.
const expireGrace = 5 * time.Second

// refuse ends id with a: it was refused where it was taken, or cancelled
// while it waited.
func (n *Node) refuse(ctx context.Context, id string, a answer, by string) {
	err := n.updatePlacement(ctx, id, func(p *placement) bool {
		if p.Lost != "" || p.Refusal != nil || p.State.Terminal() || (p.Node != "" && p.Node != by) {
			return false
		}
		p.Refusal = &refusal{Class: a.Code, Message: a.Message, Field: a.Field, At: time.Now()}
		return true
	})
	if err != nil {
		n.log.Warn("cluster: record a refusal", "id", id, "error", err)
	}
}

// expire ends id, which waited in its region's queue past its deadline,
// unless a node took it meanwhile, and returns what every node answers
// for it now.
func (n *Node) expire(ctx context.Context, id string) store.Invocation {
	var pl placement
	err := n.updatePlacement(ctx, id, func(p *placement) bool {
		defer func() { pl = *p }()
		if !p.waiting() {
			return false
		}
		if p.Attempt == 2 {
			p.Lost, p.LostAt = lostReason(p.FirstNode)+"; its retry was not taken", time.Now()
			return true
		}
		p.Refusal = &refusal{Class: unavailable, At: time.Now(), Message: sandbox.Public(sandbox.Errorf(unavailable, "",
			"no node of region %s took invocation %s within %s", p.Region, id, p.Expires.Sub(p.Created).Round(time.Second)))}
		return true
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) { // not found: its API node never recorded it
		n.log.Warn("cluster: expire a queued invocation", "id", id, "error", err)
	}
	return recordOf(id, pl)
}

// recordOf is what every node answers for id from its placement alone,
// with no node to ask: lost, refused, or queued.
func recordOf(id string, pl placement) store.Invocation {
	switch {
	case pl.Lost != "":
		return lostRecord(id, pl)
	case pl.Refusal != nil:
		return refusedRecord(id, pl)
	}
	return queuedRecord(id, pl)
}

// queuedRecord is the record every node answers for an invocation in its
// region's queue.
func queuedRecord(id string, pl placement) store.Invocation {
	return store.Invocation{ID: id, Tenant: pl.Tenant, SpecDigest: pl.SpecDigest, State: store.Queued,
		Transitions: []store.Transition{{State: store.Queued, At: pl.Created}},
		Created:     pl.Created, Where: store.Where{Region: pl.Region}}
}

// refusedRecord is the record every node answers for an invocation that
// ended without running (placement.Refusal).
func refusedRecord(id string, pl placement) store.Invocation {
	r := pl.Refusal
	return store.Invocation{ID: id, Tenant: pl.Tenant, SpecDigest: pl.SpecDigest, State: store.Failed,
		Transitions: []store.Transition{{State: store.Queued, At: pl.Created}, {State: store.Failed, At: r.At}},
		Created:     pl.Created, Where: store.Where{Region: pl.Region, Node: pl.Node},
		Result: &sandbox.Result{ID: id, ExitCode: -1, Class: r.Class, Error: r.Message}}
}

// markLost gives id up for good (unless its holder recorded its end
// first) and returns the lost record every node answers from now on.
func (n *Node) markLost(ctx context.Context, id, holder, reason string) (store.Invocation, error) {
	var lost placement
	err := n.updatePlacement(ctx, id, func(p *placement) bool {
		if p.Lost == "" && !p.State.Terminal() {
			p.Lost, p.LostAt = reason, time.Now()
		}
		lost = *p
		return true
	})
	if err != nil {
		return store.Invocation{}, sandbox.Wrap(unavailable, err, "node %s, which holds the record, is gone", holder)
	}
	if lost.Lost == "" {
		return store.Invocation{}, sandbox.Errorf(unavailable, "", "invocation %s ended (%s) on node %s, which is not live now; its record is there", id, lost.State, lost.Node)
	}
	n.log.Warn("invocation lost", "id", id, "tenant", lost.Tenant, "holder", holder, "reason", lost.Lost)
	return lostRecord(id, lost), nil
}

func (n *Node) isLive(node string) bool {
	for _, in := range n.Live() {
		if in.Name == node {
			return true
		}
	}
	return false
}

// lostRecord is the record every node answers for an invocation the
// cluster lost with its node.
func lostRecord(id string, pl placement) store.Invocation {
	node := pl.Node
	if node == "" { // its retry found no taker: it was last where it was lost
		node = pl.FirstNode
	}
	return store.Invocation{ID: id, Tenant: pl.Tenant, SpecDigest: pl.SpecDigest, State: store.Lost,
		Transitions: []store.Transition{{State: store.Queued, At: pl.Created}, {State: store.Lost, At: pl.LostAt}},
		Created:     pl.Created, Where: store.Where{Region: pl.Region, Node: node},
		Result: &sandbox.Result{ID: id, ExitCode: -1, Class: sandbox.Lost, Error: pl.Lost}}
}

// placement reads id's entry, its revision and the bucket it is in: its
// own region's first, then the other regions'. Not found in any is
// store.ErrNotFound, unless a region could not be read (unavailable).
func (n *Node) placement(ctx context.Context, id string) (placement, uint64, jetstream.KeyValue, error) {
	var pl placement
	if !sandbox.ValidTenant(id) {
		return pl, 0, nil, store.ErrNotFound
	}
	var unread error
	for _, region := range n.regions() {
		kv, err := n.placesIn(ctx, region)
		if err != nil {
			unread = err
			continue
		}
		if kv == nil {
			continue
		}
		raw, rev, err := n.placementIn(ctx, kv, region, id)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			unread = err
			continue
		}
		if err := json.Unmarshal(raw, &pl); err != nil {
			return pl, 0, nil, store.ErrNotFound
		}
		return pl, rev, kv, nil
	}
	if unread != nil {
		return pl, 0, nil, unread
	}
	return pl, 0, nil, store.ErrNotFound
}

// placementIn reads id's entry in region's bucket kv.
func (n *Node) placementIn(ctx context.Context, kv jetstream.KeyValue, region, id string) ([]byte, uint64, error) {
	e, err := kv.Get(ctx, id)
	switch {
	case err == nil:
		return e.Value(), e.Revision(), nil
	case errors.Is(err, jetstream.ErrKeyNotFound):
		// A KV get may be answered by a replica that has not seen the
		// placement yet (direct get); the stream's leader has.
		return n.leaderGet(ctx, placementsBucket(region), id)
	}
	return nil, 0, sandbox.Wrap(unavailable, err, "cluster unreachable")
}

// updatePlacement applies fn to id's entry with compare-and-set, retrying
// a lost race a few times; fn returns false to leave it.
func (n *Node) updatePlacement(ctx context.Context, id string, fn func(*placement) bool) error {
	for range 5 {
		pl, rev, kv, err := n.placement(ctx, id)
		if err != nil {
			return err
		}
		if !fn(&pl) {
			return nil
		}
		b, _ := json.Marshal(pl)
		if _, err = kv.Update(ctx, id, b, rev); err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
	}
	return errors.New("cluster: placement update lost every race")
}

// leaderGet reads id's placement from bucket's stream leader: the
// JetStream API's message get, which (unlike a direct get) only the
// leader answers. A missing or deleted key is store.ErrNotFound.
func (n *Node) leaderGet(ctx context.Context, bucket, id string) ([]byte, uint64, error) {
	req, _ := json.Marshal(map[string]string{"last_by_subj": "$KV." + bucket + "." + id})
	m, err := n.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+bucket, req)
	if err != nil {
		return nil, 0, sandbox.Wrap(unavailable, err, "cluster unreachable")
	}
	var resp struct {
		Message *struct {
			Seq  uint64 `json:"seq"`
			Data []byte `json:"data"`
		} `json:"message"`
		Error *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, 0, sandbox.Wrap(sandbox.BackendFailure, err, "unreadable placement")
	}
	if resp.Error != nil && resp.Error.Code == 404 {
		return nil, 0, store.ErrNotFound
	}
	if resp.Error != nil || resp.Message == nil {
		return nil, 0, sandbox.Errorf(unavailable, "", "the cluster could not read the placement of %s", id)
	}
	if len(resp.Message.Data) == 0 { // a delete marker
		return nil, 0, store.ErrNotFound
	}
	return resp.Message.Data, resp.Message.Seq, nil
}
