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

// An event stream read through a node that does not hold the invocation
// follows it on its holder: each request asks for what changed since the
// reader's last answer (the record's state, the live chunks past those it
// has) and waits up to a bound for a change. The live chunks are a prefix
// of the record's once the run ends, so the reader's stream numbers the
// same events as one read on the holder.

// followRequest asks a node for a record and its live chunks from Have.
type followRequest struct {
	Tenant string        `json:"tenant"`
	ID     string        `json:"id"`
	State  store.State   `json:"state,omitempty"`
	Have   int           `json:"have"`
	Wait   time.Duration `json:"wait"`
}

// followAnswer is the record and the live chunks past the request's Have.
type followAnswer struct {
	answer
	Live []sandbox.Chunk `json:"live,omitempty"`
}

// Follow returns the tenant's record id and, while it runs, its live
// chunks past the first have, from the node that holds it, waiting up to
// wait for a change from state and have. One no node holds (queued, lost,
// refused) is answered as Get answers it, without chunks.
func (n *Node) Follow(ctx context.Context, tenant, id string, state store.State, have int, wait time.Duration) (store.Invocation, []sandbox.Chunk, error) {
	pl, _, _, err := n.placement(ctx, id)
	if err != nil {
		return store.Invocation{}, nil, err
	}
	if pl.Tenant != tenant {
		return store.Invocation{}, nil, store.ErrNotFound
	}
	if pl.Node == "" || pl.Lost != "" || pl.Refusal != nil {
		rec, err := n.Get(ctx, tenant, id, wait)
		return rec, nil, err
	}
	b, _ := json.Marshal(followRequest{Tenant: tenant, ID: id, State: state, Have: have, Wait: wait})
	rctx, cancel := context.WithTimeout(ctx, wait+5*time.Second)
	defer cancel()
	m, err := n.nc.RequestWithContext(rctx, nodePrefix+pl.Node+".follow", b)
	if err != nil {
		// Its holder does not answer: Get knows whether it is lost.
		rec, gerr := n.Get(ctx, tenant, id, 0)
		if gerr != nil {
			return store.Invocation{}, nil, gerr
		}
		return rec, nil, nil
	}
	var a followAnswer
	if err := json.Unmarshal(m.Data, &a); err != nil {
		return store.Invocation{}, nil, sandbox.Wrap(sandbox.BackendFailure, err, "unreadable answer from node %s", pl.Node)
	}
	switch {
	case a.Code == sandbox.NotFound:
		return store.Invocation{}, nil, store.ErrNotFound
	case a.Record == nil:
		return store.Invocation{}, nil, answerError(a.answer)
	}
	if err := n.complete(ctx, pl.Node, tenant, &a.answer); err != nil {
		return store.Invocation{}, nil, err
	}
	return *a.Record, a.Live, nil
}

// answerFollow answers a follow request for a record this node holds.
func (n *Node) answerFollow(ctx context.Context, ex Executor, m *nats.Msg) {
	var req followRequest
	var a followAnswer
	if err := json.Unmarshal(m.Data, &req); err != nil {
		a.answer = answer{Code: sandbox.BadInput, Message: "unreadable follow request"}
	} else if rec, live, err := ex.Follow(ctx, req.Tenant, req.ID, req.State, req.Have, req.Wait); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			a.answer = answer{Code: sandbox.NotFound}
		} else {
			a.answer = answer{Code: sandbox.ClassOf(err), Message: sandbox.Public(err)}
		}
	} else {
		a.Record, a.Live = &rec, firstBytes(live, followBytes)
	}
	b, err := json.Marshal(a)
	if err != nil {
		return
	}
	if len(b) > n.maxMessage() {
		// The record alone, as a get answers it (large.go); its live
		// chunks come with the next answer.
		b = n.encode(a.answer)
	}
	_ = m.Respond(b)
}

// followBytes bounds the chunks of one follow answer; the reader asks again
// for the rest at once.
const followBytes = 1 << 20

// firstBytes is the longest prefix of chunks holding at most limit bytes,
// and at least one chunk.
func firstBytes(chunks []sandbox.Chunk, limit int) []sandbox.Chunk {
	total := 0
	for i, c := range chunks {
		total += len(c.Data)
		if total > limit && i > 0 {
			return chunks[:i]
		}
	}
	return chunks
}
