package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// cancelLimit bounds a cancel asked of another node: its own wait for the
// record to end (a minute) and the trip.
const cancelLimit = time.Minute + 5*time.Second

// Cancel cancels the tenant's invocation id on the node that holds it and
// returns its ended record. Another tenant's id is store.ErrNotFound, as a
// missing one; one the cluster lost with its node, or that ended, is the
// Conflict a local cancel gives; a holder that does not answer is
// unavailable (503) and nothing is assumed cancelled.
func (n *Node) Cancel(ctx context.Context, tenant, id string) (store.Invocation, error) {
	pl, _, _, err := n.placement(ctx, id)
	if err != nil {
		return store.Invocation{}, err
	}
	if pl.Tenant != tenant {
		return store.Invocation{}, store.ErrNotFound
	}
	if pl.waiting() && pl.Attempt == 0 {
		// In its region's queue: it ends there, unless a node takes it
		// first (then that node cancels it, below).
		a := answer{Code: sandbox.Killed, Message: sandbox.Public(sandbox.Errorf(sandbox.Killed, "", "cancelled before it started"))}
		n.refuse(ctx, id, a, "")
		if pl, _, _, err = n.placement(ctx, id); err != nil {
			return store.Invocation{}, err
		}
		if pl.Refusal != nil && pl.Refusal.Class == sandbox.Killed && pl.Node == "" {
			return refusedRecord(id, pl), nil
		}
	}
	switch {
	case pl.Lost != "":
		return store.Invocation{}, sandbox.Errorf(sandbox.Conflict, "", "invocation %s already ended (%s)", id, store.Lost)
	case pl.Refusal != nil:
		return store.Invocation{}, sandbox.Errorf(sandbox.Conflict, "", "invocation %s already ended (%s)", id, store.Failed)
	case pl.Node == "":
		return store.Invocation{}, sandbox.Errorf(unavailable, "", "invocation %s is between nodes (its retry waits for one); retry", id)
	}
	b, _ := json.Marshal(getRequest{Tenant: tenant, ID: id})
	rctx, cancel := context.WithTimeout(ctx, cancelLimit)
	defer cancel()
	m, err := n.nc.RequestWithContext(rctx, nodePrefix+pl.Node+".cancel", b)
	if err != nil {
		return store.Invocation{}, sandbox.Wrap(unavailable, err, "node %s, which holds invocation %s, did not answer the cancel", pl.Node, id)
	}
	var a answer
	if err := json.Unmarshal(m.Data, &a); err != nil {
		return store.Invocation{}, sandbox.Wrap(sandbox.BackendFailure, err, "unreadable answer from node %s", pl.Node)
	}
	switch {
	case a.Code == sandbox.NotFound:
		return store.Invocation{}, store.ErrNotFound
	case a.Record == nil:
		return store.Invocation{}, answerError(a)
	}
	if err := n.complete(ctx, pl.Node, tenant, &a); err != nil {
		return store.Invocation{}, err
	}
	return *a.Record, nil
}

// answerCancel answers a cancel request for a record this node holds.
func (n *Node) answerCancel(ctx context.Context, ex Executor, m *nats.Msg) {
	var req getRequest
	var a answer
	if err := json.Unmarshal(m.Data, &req); err != nil {
		a = answer{Code: sandbox.BadInput, Message: "unreadable cancel request"}
	} else if rec, err := ex.Cancel(ctx, req.Tenant, req.ID); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			a = answer{Code: sandbox.NotFound}
		} else {
			a = answer{Code: sandbox.ClassOf(err), Message: sandbox.Public(err), Field: sandbox.FieldOf(err)}
		}
	} else {
		a.Record = &rec
	}
	n.respond(m, a)
}
