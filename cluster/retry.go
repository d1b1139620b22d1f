package cluster

import (
	"context"
	"encoding/json"
	"time"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// An idempotent invocation (sandbox.Invocation.Idempotent) whose node is
// lost before it ends runs again, once, on a live node of its region. Its
// placement keeps the invocation for that (Spec). The first node to find
// the holder gone (any GET of the record) reads the spec from the region
// (spec.go) and claims the retry by
// compare-and-set (Attempt 2, Node empty) and dispatches it with a
// message id of its own; the taker claims the placement by
// compare-and-set too, so however many nodes look, it runs at most twice:
// the lost attempt and the retry. A retry that no node takes, or that its
// taker refuses, ends lost like any other.

// hdrAttempt marks a dispatch as the retry of an invocation whose
// placement already exists.
const hdrAttempt = "Wovyr-Attempt"

// retrySpec is what a placement keeps of inv for its retry: all of it,
// for an idempotent one (Validate bounds its size), else nothing. encoded
// is inv as JSON where the caller has it already (a dispatched message).
func retrySpec(inv *sandbox.Invocation, encoded []byte) json.RawMessage {
	if !inv.Idempotent {
		return nil
	}
	if encoded != nil {
		return encoded
	}
	b, err := json.Marshal(inv)
	if err != nil {
		return nil
	}
	return b
}

// retry runs id again on a node of its region: its holder (pl.Node) is
// gone before it ended, and it is idempotent.
func (n *Node) retry(ctx context.Context, id string, pl placement) (store.Invocation, error) {
	spec := pl.Spec
	if spec == nil {
		var err error
		if spec, err = n.spec(ctx, pl.Region, id); err != nil {
			return store.Invocation{}, sandbox.Wrap(unavailable, err, "node %s, which holds the record, is gone, and the spec kept for its retry cannot be read", pl.Node)
		}
	}
	var inv sandbox.Invocation
	if err := json.Unmarshal(spec, &inv); err != nil {
		return n.markLost(ctx, id, pl.Node, lostReason(pl.Node))
	}
	won := false
	err := n.updatePlacement(ctx, id, func(p *placement) bool {
		won = p.Lost == "" && !p.State.Terminal() && p.Attempt == 0 && p.Node == pl.Node
		if won {
			p.Attempt, p.FirstNode, p.Node, p.RetriedAt = 2, p.Node, "", time.Now()
		}
		return won
	})
	if err != nil {
		return store.Invocation{}, sandbox.Wrap(unavailable, err, "node %s, which holds the record, is gone", pl.Node)
	}
	if !won { // another node got there first: read again
		return n.Get(ctx, inv.Tenant, id, 0)
	}
	n.log.Warn("cluster: retrying an idempotent invocation lost with its node", "id", id, "tenant", inv.Tenant, "lost_with", pl.Node)
	rec, err := n.publish(ctx, pl.Region, &inv, 2)
	if err != nil {
		return n.markLost(ctx, id, pl.Node, lostReason(pl.Node)+"; its retry was not taken: "+sandbox.Public(err))
	}
	return rec, nil
}

// retryPending answers for id while its retry waits for a taker, and
// gives it up once no node can take it any more.
func (n *Node) retryPending(ctx context.Context, id string, pl placement) (store.Invocation, error) {
	if time.Since(pl.RetriedAt) > n.o.QueueTimeout+expireGrace {
		return n.markLost(ctx, id, pl.FirstNode, lostReason(pl.FirstNode)+"; its retry was not taken")
	}
	return store.Invocation{}, sandbox.Errorf(unavailable, "", "invocation %s was lost with node %s and is being retried", id, pl.FirstNode)
}

// claimRetry takes the placement of a retried invocation for this node;
// false means another node has (or the retry was given up).
func (n *Node) claimRetry(ctx context.Context, id string) (bool, error) {
	claimed := false
	err := n.updatePlacement(ctx, id, func(p *placement) bool {
		claimed = p.Attempt == 2 && p.Node == "" && p.Lost == ""
		if claimed {
			p.Node = n.o.Name
		}
		return claimed
	})
	return claimed, err
}
