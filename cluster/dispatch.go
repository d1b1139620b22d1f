package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wovyr/wovyr/gpu"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// Headers of a dispatched invocation.
const (
	hdrReply    = "Wovyr-Reply"     // the API node's inbox for the answer
	hdrDeadline = "Wovyr-Accept-By" // UnixNano after which no node may take it
	hdrFrom     = "Wovyr-From"      // the API node's name, for the log
	hdrCreated  = "Wovyr-Created"   // UnixNano when the API node published it
)

// publishRetries bounds the publishes of a dispatch whose first publish
// failed.
const publishRetries = 3

// Class of a cluster that cannot take or answer for work now, and of an
// invocation no node of its region took before its queue deadline. 503
// with Retry-After, like any "not now".
const unavailable sandbox.Class = "unavailable"

// Class of an invocation larger than NATS carries: 413, as a body over the
// API's cap.
const tooLarge sandbox.Class = "too-large"

// answer is what a node sends back: the record, or the typed refusal.
type answer struct {
	Record  *store.Invocation `json:"record,omitempty"`
	Code    sandbox.Class     `json:"code,omitempty"`
	Message string            `json:"message,omitempty"`
	Field   string            `json:"field,omitempty"`
	// Large is set when the record's output was left out (large.go).
	Large *outputSizes `json:"large,omitempty"`
}

// getRequest asks a node for a record.
type getRequest struct {
	Tenant string        `json:"tenant"`
	ID     string        `json:"id"`
	Wait   time.Duration `json:"wait"`
}

func streamName(region string) string { return "WOVYR_WORK_" + region }

func workSubject(region, backend, tenant string) string {
	return workPrefix + region + "." + backend + "." + tenant
}

// take runs one dispatched invocation: end it if it waited in the queue
// past its deadline, claim its placement (compare-and-set: a redelivered
// message is not run twice, nor one cancelled meanwhile), record it through
// ex, answer the API node if it still waits, and only then ack.
func (n *Node) take(ctx context.Context, ex Executor, m jetstream.Msg) {
	h := m.Headers()
	reply := h.Get(hdrReply)
	var inv sandbox.Invocation
	if err := json.Unmarshal(m.Data(), &inv); err != nil || inv.ID == "" {
		n.log.Warn("cluster: unreadable dispatch", "subject", m.Subject(), "error", err)
		_ = m.Term()
		return
	}
	retried := h.Get(hdrAttempt) == "2"
	by, _ := strconv.ParseInt(h.Get(hdrDeadline), 10, 64)
	if by == 0 || time.Now().UnixNano() > by {
		n.log.Warn("cluster: an invocation waited in the queue past its deadline", "id", inv.ID, "from", h.Get(hdrFrom))
		n.expire(context.WithoutCancel(ctx), inv.ID)
		_ = m.Term()
		return
	}
	claimed, err := n.claim(ctx, &inv, m, retried)
	if err != nil {
		// NATS trouble: leave it for redelivery (to us or another node).
		n.log.Warn("cluster: claim", "id", inv.ID, "error", err)
		_ = m.Nak()
		return
	}
	if !claimed {
		n.log.Info("cluster: dispatch already taken or ended", "id", inv.ID, "retry", retried)
		_ = m.Ack()
		return
	}
	rec, err := ex.Accept(ctx, &inv)
	var a answer
	switch {
	case err != nil && retried:
		// Its retry refused here: it ends lost, as without one.
		_, _ = n.markLost(context.WithoutCancel(ctx), inv.ID, n.o.Name, "node-lost: its first node stopped answering while it ran; its retry was refused: "+sandbox.Public(err))
		a = answer{Code: sandbox.ClassOf(err), Message: sandbox.Public(err), Field: sandbox.FieldOf(err)}
	case err != nil:
		// Refused here (floor-unmet, rate-limited, …): nothing ran; the
		// placement ends with the refusal, which every node answers, and
		// the API node, if it still waits, hears why.
		a = answer{Code: sandbox.ClassOf(err), Message: sandbox.Public(err), Field: sandbox.FieldOf(err)}
		n.refuse(context.WithoutCancel(ctx), inv.ID, a, n.o.Name)
	default:
		a.Record = &rec
	}
	if b, err := json.Marshal(a); err == nil && reply != "" {
		_ = n.nc.Publish(reply, b)
	}
	// The record is durable (or nothing was accepted): now the message
	// may go.
	if err := m.Ack(); err != nil {
		n.log.Warn("cluster: ack", "id", inv.ID, "error", err)
	}
}

// claim makes this node inv's holder: a new placement (create-only), or
// one that waits for a node — written by its API node when no node
// answered in time (queue), or by a retry after its first node was lost
// (retry.go). false: another node has it, or it ended without one
// (cancelled, expired).
func (n *Node) claim(ctx context.Context, inv *sandbox.Invocation, m jetstream.Msg, retried bool) (bool, error) {
	id := inv.ID
	if !retried {
		// Usually nothing is written yet: the claim is a create.
		h := m.Headers()
		created, _ := strconv.ParseInt(h.Get(hdrCreated), 10, 64)
		by, _ := strconv.ParseInt(h.Get(hdrDeadline), 10, 64)
		p, err := n.newPlacement(ctx, inv, m.Data(), n.o.Name, n.o.Region, time.Unix(0, created), time.Unix(0, by))
		if err != nil {
			return false, err
		}
		pl, _ := json.Marshal(p)
		_, err = n.places.Create(ctx, id, pl)
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return err == nil, err
		}
		// Its API node recorded it as queued (queue), or another node has it.
	}
	claimed := false
	err := n.updatePlacement(ctx, id, func(p *placement) bool {
		claimed = p.waiting() && (p.Attempt == 2) == retried
		if claimed {
			p.Node = n.o.Name
		}
		return claimed
	})
	if errors.Is(err, store.ErrNotFound) {
		return false, nil // its placement is gone (past retention): nothing to answer for
	}
	return claimed, err
}

// answerGet answers a get request for a record this node holds.
func (n *Node) answerGet(ctx context.Context, ex Executor, m *nats.Msg) {
	var req getRequest
	var a answer
	if err := json.Unmarshal(m.Data, &req); err != nil {
		a = answer{Code: sandbox.BadInput, Message: "unreadable get request"}
	} else if rec, err := ex.Record(ctx, req.Tenant, req.ID, req.Wait); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			a = answer{Code: sandbox.NotFound}
		} else {
			a = answer{Code: sandbox.ClassOf(err), Message: sandbox.Public(err)}
		}
	} else {
		a.Record = &rec
	}
	n.respond(m, a)
}

// respond answers m with a; a record larger than a message goes without
// its output, which the reader then fetches (large.go).
func (n *Node) respond(m *nats.Msg, a answer) { _ = m.Respond(n.encode(a)) }

// Dispatch hands inv to region's queue, where a live node of the region
// with room pulls it (pull.go): it picks the weakest backend at or above
// the required strength that a live node there certified, publishes, and
// waits for a node's answer (its durable record or its typed refusal) up
// to AcceptTimeout; no answer by then is the queued record, which every
// node answers until a node takes it (queue). With wait, it then waits for
// the record to end.
func (n *Node) Dispatch(ctx context.Context, region string, inv *sandbox.Invocation, wait time.Duration) (store.Invocation, error) {
	start := time.Now()
	rec, err := n.publish(ctx, region, inv, 1)
	if err != nil || wait <= 0 || rec.State.Terminal() {
		return rec, err
	}
	var got store.Invocation
	if rec.Node != "" { // its holder answered: ask it straight away
		got, err = n.ask(ctx, rec.Node, getRequest{Tenant: inv.Tenant, ID: inv.ID, Wait: wait - time.Since(start)})
	} else {
		got, err = n.Get(ctx, inv.Tenant, inv.ID, wait-time.Since(start))
	}
	if err != nil {
		return rec, nil // accepted: the caller polls
	}
	return got, nil
}

// publish puts attempt (1, or 2 for a retry) of inv on region's queue and
// waits for a node's answer: its durable record, or its refusal; without
// one, the placement records it as queued (queue).
func (n *Node) publish(ctx context.Context, region string, inv *sandbox.Invocation, attempt int) (store.Invocation, error) {
	var none store.Invocation
	backend, err := n.pick(region, inv)
	if err != nil {
		return none, err
	}
	data, err := json.Marshal(inv)
	if err != nil {
		return none, err
	}
	if int64(len(data)) > n.nc.MaxPayload() {
		return none, sandbox.Errorf(tooLarge, "", "the invocation is %d bytes; the cluster carries at most %d to another node", len(data), n.nc.MaxPayload())
	}
	created := time.Now()
	by := created.Add(n.o.QueueTimeout)
	inbox := n.nc.NewRespInbox()
	sub, err := n.nc.SubscribeSync(inbox)
	if err != nil {
		return none, sandbox.Wrap(unavailable, err, "cluster unreachable")
	}
	defer sub.Unsubscribe()
	msg := nats.NewMsg(workSubject(region, backend, inv.Tenant))
	msg.Data = data
	msg.Header.Set(hdrReply, inbox)
	msg.Header.Set(hdrDeadline, strconv.FormatInt(by.UnixNano(), 10))
	msg.Header.Set(hdrFrom, n.o.Name)
	msg.Header.Set(hdrCreated, strconv.FormatInt(created.UnixNano(), 10))
	msg.Header.Set(jetstream.MsgIDHeader, inv.ID) // a repeated publish is one message
	if attempt > 1 {
		msg.Header.Set(jetstream.MsgIDHeader, inv.ID+"#"+strconv.Itoa(attempt))
		msg.Header.Set(hdrAttempt, strconv.Itoa(attempt))
	}
	pctx, cancel := context.WithTimeout(ctx, n.o.AcceptTimeout)
	defer cancel()
	ack, err := n.js.PublishMsg(pctx, msg)
	for again := 1; err != nil && again <= publishRetries && pctx.Err() == nil; again++ {
		// The stream may have stored it and its ack been lost (a leader
		// moving): the same message id again is one message, so asking
		// again is safe, and a duplicate then means the first was stored.
		select {
		case <-pctx.Done():
		case <-time.After(time.Duration(again) * 50 * time.Millisecond):
		}
		if ack, err = n.js.PublishMsg(pctx, msg); err == nil && ack.Duplicate {
			ack.Duplicate = false
		}
	}
	if err != nil {
		return none, sandbox.Wrap(unavailable, err, "region %s did not take the invocation", region)
	}
	if ack.Duplicate {
		// The stream has had this id already: it runs once, not again.
		return none, sandbox.Errorf(sandbox.Conflict, "id", "invocation %s was dispatched already", inv.ID)
	}
	_ = n.nc.Publish(wakeSubject(region), []byte(msg.Subject))
	m, err := sub.NextMsgWithContext(pctx)
	if err != nil {
		// Durable in the queue, no node with room yet: accepted, queued.
		return n.queue(ctx, region, inv, data, attempt, created, by, sub)
	}
	var a answer
	if err := json.Unmarshal(m.Data, &a); err != nil {
		return none, sandbox.Wrap(sandbox.BackendFailure, err, "unreadable answer from region %s", region)
	}
	if a.Record == nil {
		return none, answerError(a)
	}
	return *a.Record, nil
}

// queue records that inv, published at created, waits in region's
// queue for a node (until by), unless a node has taken it meanwhile, and
// returns the record every node answers for it now. Written only when no
// node answered in AcceptTimeout: a taker that answers at once writes the
// only placement (claim), and the caller has no id to ask about before
// Dispatch returns.
func (n *Node) queue(ctx context.Context, region string, inv *sandbox.Invocation, data []byte, attempt int, created, by time.Time, sub *nats.Subscription) (store.Invocation, error) {
	if attempt > 1 { // its placement exists: the retry's (retry.go)
		return n.Get(ctx, inv.Tenant, inv.ID, 0)
	}
	pl, err := n.newPlacement(context.WithoutCancel(ctx), inv, data, "", region, created, by)
	if err != nil {
		return store.Invocation{}, sandbox.Wrap(unavailable, err, "invocation %s could not be queued", inv.ID)
	}
	b, _ := json.Marshal(pl)
	kv, err := n.placesIn(context.WithoutCancel(ctx), region) // the region's own record of it
	if err == nil && kv == nil {
		err = fmt.Errorf("region %s has no placements bucket", region)
	}
	if err == nil {
		_, err = kv.Create(context.WithoutCancel(ctx), inv.ID, b)
	}
	if err == nil {
		return queuedRecord(inv.ID, pl), nil
	}
	if errors.Is(err, jetstream.ErrKeyExists) {
		// A node took it as the wait ran out: its answer is on the way.
		if m, err := sub.NextMsg(2 * time.Second); err == nil {
			var a answer
			if json.Unmarshal(m.Data, &a) == nil && a.Record != nil {
				return *a.Record, nil
			}
		}
		return n.Get(ctx, inv.Tenant, inv.ID, 0)
	}
	return store.Invocation{}, sandbox.Wrap(unavailable, err, "invocation %s is in region %s's queue, but the cluster could not record it; retry", inv.ID, pl.Region)
}

// pick is the subject token a dispatch goes to: the weakest backend at or
// above the required strength that accepts the kind and that some live
// node of region certified — for GPU work, a node with enough matching
// devices, under the token gpu-<backend> that only nodes with GPUs pull.
// It never picks one below the requirement.
func (n *Node) pick(region string, inv *sandbox.Invocation) (string, error) {
	required := sandbox.DefaultFloor(inv.Policy.Trust)
	if n.o.Required != nil {
		required = n.o.Required(inv.Policy)
	}
	req := gpu.RequestFor(inv.Resources)
	var best *Backend
	for _, in := range n.Live() {
		if in.Region != region || !hasGPUs(in, req) {
			continue
		}
		for i, b := range in.Backends {
			if b.Strength >= required && acceptsKind(b, inv.Workload.Kind) && (best == nil || b.Strength < best.Strength) {
				best = &in.Backends[i]
			}
		}
	}
	switch {
	case best == nil && req.Count > 0:
		return "", sandbox.Errorf(sandbox.FloorUnmet, "resources.gpu", "no live node of region %s has %d matching GPUs and a certified backend at or above %s for a %s workload", region, req.Count, required, inv.Workload.Kind)
	case best == nil:
		return "", sandbox.Errorf(sandbox.FloorUnmet, "", "no live node of region %s has a certified backend at or above %s for a %s workload", region, required, inv.Workload.Kind)
	case req.Count > 0:
		return gpuToken + best.Name, nil
	}
	return best.Name, nil
}

// gpuToken prefixes the backend token of GPU work's subjects.
const gpuToken = "gpu-"

// hasGPUs reports whether in has the devices req asks for (any node does
// for a request of none).
func hasGPUs(in Info, req gpu.Request) bool {
	k := int64(0)
	for _, g := range in.GPUs {
		if req.Matches(gpu.Device{MIGProfile: g.MIGProfile, MemoryBytes: g.MemoryBytes}) {
			k++
		}
	}
	return k >= req.Count
}

func acceptsKind(b Backend, k sandbox.WorkloadKind) bool {
	for _, x := range b.Kinds {
		if x == k {
			return true
		}
	}
	return false
}

// ask requests a record from node.
func (n *Node) ask(ctx context.Context, node string, req getRequest) (store.Invocation, error) {
	b, _ := json.Marshal(req)
	rctx, cancel := context.WithTimeout(ctx, req.Wait+5*time.Second)
	defer cancel()
	m, err := n.nc.RequestWithContext(rctx, nodePrefix+node+".get", b)
	if err != nil {
		return store.Invocation{}, sandbox.Wrap(unavailable, err, "node %s, which holds the record, did not answer", node)
	}
	var a answer
	if err := json.Unmarshal(m.Data, &a); err != nil {
		return store.Invocation{}, sandbox.Wrap(sandbox.BackendFailure, err, "unreadable answer from node %s", node)
	}
	if a.Code == sandbox.NotFound {
		return store.Invocation{}, store.ErrNotFound
	}
	if a.Record == nil {
		return store.Invocation{}, answerError(a)
	}
	if err := n.complete(ctx, node, req.Tenant, &a); err != nil {
		return store.Invocation{}, err
	}
	return *a.Record, nil
}

// answerError rebuilds a remote node's typed refusal: the same class,
// field and tenant message as if this node had refused.
func answerError(a answer) error {
	msg := a.Message
	prefix := string(a.Code)
	if a.Field != "" {
		prefix += " (" + a.Field + ")"
	}
	msg = strings.TrimPrefix(msg, prefix+": ")
	return &sandbox.Error{Class: a.Code, Field: a.Field, Msg: msg}
}
