package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// Headers of a dispatched invocation.
const (
	hdrReply    = "Wovyr-Reply"     // the API node's inbox for the answer
	hdrDeadline = "Wovyr-Accept-By" // UnixNano after which no node may take it
	hdrFrom     = "Wovyr-From"      // the API node's name, for the log
)

// Class of a dispatch that found no taker in time: the region's nodes are
// busy or gone. 503 with Retry-After, like any "not now".
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
}

// getRequest asks a node for a record.
type getRequest struct {
	Tenant string        `json:"tenant"`
	ID     string        `json:"id"`
	Wait   time.Duration `json:"wait"`
}

func streamName(region string) string { return "WOVYR_WORK_" + region }

func workSubject(region, backend string) string { return workPrefix + region + "." + backend }

// consume creates the region's stream (placed on the region's servers
// where they are tagged) and pulls from one shared durable consumer per
// certified backend.
func (n *Node) consume(ctx context.Context, ex Executor, backends []Backend) ([]func(), error) {
	cfg := jetstream.StreamConfig{Name: streamName(n.o.Region), Subjects: []string{workPrefix + n.o.Region + ".>"},
		Description: "wovyr work for region " + n.o.Region, Retention: jetstream.WorkQueuePolicy,
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, Replicas: n.o.Replicas}
	var st jetstream.Stream
	err := retry(ctx, func(ctx context.Context) error {
		var err error
		st, err = n.js.CreateOrUpdateStream(ctx, cfg)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: stream %s: %w", cfg.Name, err)
	}
	var stops []func()
	sem := make(chan struct{}, max(n.o.Capacity, 1)*2)
	var wg sync.WaitGroup
	stops = append(stops, wg.Wait)
	for _, b := range backends {
		cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "work-" + b.Name,
			FilterSubject: workSubject(n.o.Region, b.Name), AckPolicy: jetstream.AckExplicitPolicy,
			AckWait: 30 * time.Second, MaxAckPending: 10000})
		if err != nil {
			return stops, fmt.Errorf("cluster: consumer for %s: %w", b.Name, err)
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				n.take(ctx, ex, m)
			}()
		}, jetstream.PullMaxMessages(64))
		if err != nil {
			return stops, fmt.Errorf("cluster: consume %s: %w", b.Name, err)
		}
		// Stop before the wait for the handlers: prepend.
		stops = append([]func(){cc.Stop}, stops...)
	}
	return stops, nil
}

// take runs one dispatched invocation: drop it if its API node has given
// up, claim its id (create-only: a redelivered message is not run twice),
// record it through ex, answer, and only then ack.
func (n *Node) take(ctx context.Context, ex Executor, m jetstream.Msg) {
	h := m.Headers()
	reply := h.Get(hdrReply)
	by, _ := strconv.ParseInt(h.Get(hdrDeadline), 10, 64)
	if by == 0 || time.Now().UnixNano() > by {
		n.log.Warn("cluster: dropped a dispatch past its accept-by", "from", h.Get(hdrFrom), "subject", m.Subject())
		_ = m.Term()
		return
	}
	var inv sandbox.Invocation
	if err := json.Unmarshal(m.Data(), &inv); err != nil || inv.ID == "" {
		n.log.Warn("cluster: unreadable dispatch", "subject", m.Subject(), "error", err)
		_ = m.Term()
		return
	}
	retried := h.Get(hdrAttempt) == "2"
	claimed, err := n.claim(ctx, &inv, m.Data(), retried)
	if err != nil {
		// NATS trouble: leave it for redelivery (to us or another node).
		n.log.Warn("cluster: claim", "id", inv.ID, "error", err)
		_ = m.Nak()
		return
	}
	if !claimed {
		n.log.Warn("cluster: dispatch already taken", "id", inv.ID, "retry", retried)
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
		// Refused here (floor-unmet, rate-limited, …): nothing recorded,
		// the claim goes, the API node hears why.
		_ = n.places.Delete(context.WithoutCancel(ctx), inv.ID)
		a = answer{Code: sandbox.ClassOf(err), Message: sandbox.Public(err), Field: sandbox.FieldOf(err)}
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

// claim makes this node inv's holder (data is inv as dispatched): a new
// placement (create-only, so a redelivered message is not run twice), or,
// for a retry, the placement its retry left without a node (retry.go).
// false: another node has it.
func (n *Node) claim(ctx context.Context, inv *sandbox.Invocation, data []byte, retried bool) (bool, error) {
	if retried {
		return n.claimRetry(ctx, inv.ID)
	}
	pl, _ := json.Marshal(placement{Node: n.o.Name, Region: n.o.Region, Tenant: inv.Tenant,
		SpecDigest: store.Digest(inv), Created: time.Now(), Spec: retrySpec(inv, data)})
	_, err := n.places.Create(ctx, inv.ID, pl)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return false, nil
	}
	return err == nil, err
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

// respond answers m with a, or with a typed failure if a is more than the
// cluster carries.
func (n *Node) respond(m *nats.Msg, a answer) {
	b, err := json.Marshal(a)
	if err != nil {
		return
	}
	if len(b) > int(n.nc.MaxPayload()) {
		b, _ = json.Marshal(answer{Code: sandbox.BackendFailure, Message: "the record is larger than the cluster carries"})
	}
	_ = m.Respond(b)
}

// Dispatch hands inv to a live node of region: it picks the weakest
// backend at or above the required strength that a live node there
// certified, publishes to the region's stream, and waits for a node's
// answer (its durable record or its typed refusal); then, with wait, for
// the record to end.
func (n *Node) Dispatch(ctx context.Context, region string, inv *sandbox.Invocation, wait time.Duration) (store.Invocation, error) {
	if inv.Resources.GPU > 0 {
		return store.Invocation{}, sandbox.Errorf(sandbox.FloorUnmet, "resources.gpu", "GPU work runs only on a node of the region that accepts it; it is not dispatched to region %s", region)
	}
	rec, err := n.publish(ctx, region, inv, 1)
	if err != nil || wait <= 0 || rec.State.Terminal() {
		return rec, err
	}
	got, err := n.ask(ctx, rec.Node, getRequest{Tenant: inv.Tenant, ID: inv.ID, Wait: wait})
	if err != nil {
		return rec, nil // accepted: the caller polls
	}
	return got, nil
}

// publish puts attempt (1, or 2 for a retry) of inv on region's stream
// and waits for a node's answer: its durable record, or its refusal.
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
		return none, sandbox.Errorf(tooLarge, "", "the invocation is %d bytes; the cluster carries at most %d to another region", len(data), n.nc.MaxPayload())
	}
	inbox := n.nc.NewRespInbox()
	sub, err := n.nc.SubscribeSync(inbox)
	if err != nil {
		return none, sandbox.Wrap(unavailable, err, "cluster unreachable")
	}
	defer sub.Unsubscribe()
	by := time.Now().Add(n.o.AcceptTimeout)
	msg := nats.NewMsg(workSubject(region, backend))
	msg.Data = data
	msg.Header.Set(hdrReply, inbox)
	msg.Header.Set(hdrDeadline, strconv.FormatInt(by.UnixNano(), 10))
	msg.Header.Set(hdrFrom, n.o.Name)
	msg.Header.Set(jetstream.MsgIDHeader, inv.ID) // a repeated publish is one message
	if attempt > 1 {
		msg.Header.Set(jetstream.MsgIDHeader, inv.ID+"#"+strconv.Itoa(attempt))
		msg.Header.Set(hdrAttempt, strconv.Itoa(attempt))
	}
	pctx, cancel := context.WithTimeout(ctx, n.o.AcceptTimeout)
	defer cancel()
	ack, err := n.js.PublishMsg(pctx, msg)
	if err != nil {
		return none, sandbox.Wrap(unavailable, err, "region %s did not take the invocation", region)
	}
	if ack.Duplicate {
		// The stream has had this id already: it runs once, not again.
		return none, sandbox.Errorf(sandbox.Conflict, "id", "invocation %s was dispatched already", inv.ID)
	}
	// Past by, no node takes it; a little longer covers a taker's record.
	actx, cancel2 := context.WithDeadline(ctx, by.Add(2*time.Second))
	defer cancel2()
	m, err := sub.NextMsgWithContext(actx)
	if err != nil {
		return none, sandbox.Errorf(unavailable, "", "no node of region %s took the invocation within %s", region, n.o.AcceptTimeout)
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

// pick is the backend a dispatch goes to: the weakest at or above the
// required strength that accepts the kind and that some live node of
// region certified. It never picks one below the requirement.
func (n *Node) pick(region string, inv *sandbox.Invocation) (string, error) {
	required := sandbox.DefaultFloor(inv.Policy.Trust)
	if n.o.Required != nil {
		required = n.o.Required(inv.Policy)
	}
	var best *Backend
	for _, in := range n.Live() {
		if in.Region != region {
			continue
		}
		for i, b := range in.Backends {
			if b.Strength >= required && acceptsKind(b, inv.Workload.Kind) && (best == nil || b.Strength < best.Strength) {
				best = &in.Backends[i]
			}
		}
	}
	if best == nil {
		return "", sandbox.Errorf(sandbox.FloorUnmet, "", "no live node of region %s has a certified backend at or above %s for a %s workload", region, required, inv.Workload.Kind)
	}
	return best.Name, nil
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
