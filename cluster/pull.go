package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A region's queue is its stream, and every node of the region takes from
// it only what it has room for, choosing the tenant by weight (weighted).
// A node that took everything it could see would hold a tenant's burst in
// its own queue while another node idled, and each node's fair scheduler
// would share only what that node happened to take; pulling by weight
// into bounded room makes the region one fair queue.
//
// Subjects are wovyr.work.<region>.<backend>.<tenant>, each with its own
// durable pull consumer (work-<backend>-<tenant>), made by the first node
// that sees work on it and shared by every node of the region that
// certified the backend. (Consumers of a work-queue stream may not
// overlap; these never do.) On each node a holder per subject keeps one
// long pull open, so a message reaches a node as soon as it is stored, and
// holds what it brings: one message, or a batch the size of the node's
// room. The node's loop takes held messages while it has room, by weight
// among the tenants holding one: while every tenant has work waiting,
// each node holds a message of each, so its takes, and the region's,
// follow the weights. A message held longer than
// holdMax while the node has no room goes back to the queue for a node
// that has.

const (
	// pullIdle is how often the loop reads the queue without a wake: it
	// finds subjects whose wake was missed and messages redelivered.
	pullIdle = 200 * time.Millisecond
	// pullWait is how long one long pull stays open.
	pullWait = 5 * time.Second
	// holdMax is how long a message may be held without room: long
	// enough that a light tenant's message waits out the heavier ones'
	// turns here rather than losing its place, short enough that a node
	// with room elsewhere gets it well inside the ack wait (30s).
	holdMax = 5 * time.Second
	// holderIdle is how long a subject's holder (and its consumer, on
	// the server) lasts without a message: a region does not keep one
	// pull per tenant and backend ever seen.
	holderIdle = 5 * time.Minute
)

func wakeSubject(region string) string { return "wovyr.wake." + region }

// puller is one node's side of its region's queue.
type puller struct {
	n        *Node
	ex       Executor
	st       jetstream.Stream
	backends map[string]bool // subject tokens of the backends this node certified now; guarded by mu
	gpus     bool            // the node has GPUs: it pulls GPU work too
	fair     *weighted
	poked    chan struct{}
	inflight atomic.Int64 // taken, not yet accepted or refused
	wg       sync.WaitGroup

	mu      sync.Mutex
	freed   chan struct{}      // closed (and replaced) when room may have freed
	holders map[string]*holder // by subject
	turn    map[string]int     // by tenant: which of its subjects goes next
}

// holder keeps one long pull open on its subject's consumer and holds
// what it brings, at most one pull's batch.
type holder struct {
	subj, tenant string
	held         []heldMsg     // guarded by puller.mu, oldest first
	drained      chan struct{} // closed by the loop when held empties
	released     bool          // held went back to the queue (release)
}

type heldMsg struct {
	m     jetstream.Msg
	since time.Time
}

// consume creates the region's stream (placed on the region's servers
// where they are tagged) and starts the node's puller; the returned stops
// end it and wait for the messages it took.
func (n *Node) consume(ctx context.Context, ex Executor, backends []Backend) (*puller, []func(), error) {
	st, err := n.regionStream(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, b := range backends {
		// The consumer of one backend for every tenant, as nodes before
		// the per-tenant subjects made it: nothing is published to it now.
		if err := st.DeleteConsumer(ctx, "work-"+b.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			n.log.Warn("cluster: remove an old consumer", "consumer", "work-"+b.Name, "error", err)
		}
	}
	p := &puller{n: n, ex: ex, st: st, backends: map[string]bool{},
		fair: newWeighted(ex.Weights()), poked: make(chan struct{}, 1), freed: make(chan struct{}), holders: map[string]*holder{}, turn: map[string]int{}}
	p.gpus = len(ex.GPUs()) > 0
	p.certified(backends)
	pctx, stop := context.WithCancel(ctx)
	sub, err := n.nc.Subscribe(wakeSubject(n.o.Region), func(m *nats.Msg) { p.ensure(pctx, string(m.Data)) })
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("cluster: subscribe: %w", err)
	}
	done := make(chan struct{})
	go func() { defer close(done); p.run(pctx) }()
	return p, []func(){func() { _ = sub.Unsubscribe(); stop(); <-done }, p.wg.Wait}, nil
}

// regionStream creates (or updates) the region's queue, pinned to the
// region's NATS servers (inRegion): a queued invocation, its stdin and
// files with it, is the region's data.
func (n *Node) regionStream(ctx context.Context) (jetstream.Stream, error) {
	cfg := jetstream.StreamConfig{Name: streamName(n.o.Region), Subjects: []string{workPrefix + n.o.Region + ".>"},
		Description: "wovyr work for region " + n.o.Region, Retention: jetstream.WorkQueuePolicy,
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, Replicas: n.o.Replicas}
	var st jetstream.Stream
	err := n.inRegion(ctx, n.o.Region, "stream "+cfg.Name, func(ctx context.Context, pl *jetstream.Placement) error {
		cfg.Placement = pl
		var err error
		st, err = n.js.CreateOrUpdateStream(ctx, cfg)
		return err
	})
	return st, err
}

// JetStream's error codes for a stream it cannot place.
const (
	jsNoPeers      jetstream.ErrorCode = 10005 // no suitable peers for placement
	jsInsufficient jetstream.ErrorCode = 10023 // insufficient resources
)

// certified sets the backends the node pulls work for: those it certified
// now. A holder of a backend no longer among them gives back what it
// holds and stops (hold, takeHeld).
func (p *puller) certified(backends []Backend) {
	set := map[string]bool{}
	for _, b := range backends {
		set[b.Name] = true
		if p.gpus {
			set[gpuToken+b.Name] = true // its GPU work: only a node with GPUs pulls it
		}
	}
	p.mu.Lock()
	p.backends = set
	p.mu.Unlock()
	p.poke()
}

// serves reports whether the node pulls subj's work now. Call with mu.
func (p *puller) serves(subj string) bool {
	backend, tenant, ok := splitWork(p.n.o.Region, subj)
	_, known := p.fair.weight[tenant]
	return ok && p.backends[backend] && known
}

// poke wakes the loop; it never blocks.
func (p *puller) poke() {
	select {
	case p.poked <- struct{}{}:
	default:
	}
}

// ensure starts subj's holder if this node serves subj (a backend it
// certified, a tenant it knows) and has none.
func (p *puller) ensure(ctx context.Context, subj string) {
	backend, tenant, _ := splitWork(p.n.o.Region, subj)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.serves(subj) {
		return
	}
	if _, ok := p.holders[subj]; ok || ctx.Err() != nil {
		return
	}
	h := &holder{subj: subj, tenant: tenant}
	p.holders[subj] = h
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.hold(ctx, h, backend)
		p.mu.Lock()
		delete(p.holders, subj)
		p.mu.Unlock()
	}()
}

// hold is a holder's life: pull a batch the size of the node's room (at
// least one, at most maxBatch), hold each message as it comes until the
// loop has taken or released them all, and again, until the subject has
// been idle for holderIdle. It holds one even without room, so that when
// room comes every tenant with work has a message here to be chosen.
func (p *puller) hold(ctx context.Context, h *holder, backend string) {
	cons, err := p.st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "work-" + backend + "-" + h.tenant,
		FilterSubject: h.subj, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
		MaxAckPending: 10000, InactiveThreshold: holderIdle, Replicas: p.n.o.Replicas})
	if err != nil {
		if ctx.Err() == nil {
			p.n.log.Warn("cluster: consumer", "subject", h.subj, "error", err)
		}
		return
	}
	defer p.drop(h)
	last := time.Now()
	for ctx.Err() == nil && time.Since(last) < holderIdle {
		p.mu.Lock()
		if !p.serves(h.subj) { // its backend's certification is gone
			p.mu.Unlock()
			return
		}
		released := h.released
		h.released = false
		p.mu.Unlock()
		for released && ctx.Err() == nil && p.room() <= 0 {
			// What it held went back for a node with room: pull again only
			// once this one has some, or it would come straight back here.
			select {
			case <-ctx.Done():
			case <-p.roomed():
			case <-time.After(pullIdle):
			}
		}
		nctx, cancel := context.WithTimeout(ctx, pullWait)
		batch, err := cons.Fetch(min(max(p.room(), 1), maxBatch), jetstream.FetchContext(nctx))
		if err == nil {
			drained := make(chan struct{})
			p.mu.Lock()
			h.drained = drained
			p.mu.Unlock()
			got := 0
			for m := range batch.Messages() {
				got++
				p.mu.Lock()
				h.held = append(h.held, heldMsg{m: m, since: time.Now()})
				p.mu.Unlock()
				p.takeHeld(ctx) // here rather than in the loop: one hand-off fewer
			}
			err = batch.Error()
			if got > 0 {
				last = time.Now()
				select {
				case <-drained:
				case <-ctx.Done():
				}
			}
		}
		cancel()
		quiet := err == nil || errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, context.DeadlineExceeded)
		if !quiet && ctx.Err() == nil {
			p.n.log.Warn("cluster: pull", "subject", h.subj, "error", err)
			if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) {
				return // made again by the next wake
			}
			select {
			case <-ctx.Done():
			case <-time.After(pullIdle):
			}
		}
	}
}

// maxBatch bounds one pull: what a node can hold of one subject.
const maxBatch = 16

// drop ends h: what it still holds goes back to the queue for another
// node (shutting down, or the subject's consumer gone).
func (p *puller) drop(h *holder) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, hm := range h.held {
		_ = hm.m.Nak()
	}
	h.held = nil
}

// shift removes h's oldest held message; when h is empty its holder may
// pull again. Call with mu.
func (h *holder) shift() jetstream.Msg {
	m := h.held[0].m
	h.held = h.held[1:]
	if len(h.held) == 0 && h.drained != nil {
		close(h.drained)
		h.drained = nil
	}
	return m
}

// roomed is closed when the node's room may have grown.
func (p *puller) roomed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.freed
}

// broadcast wakes the holders waiting for room.
func (p *puller) broadcast() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.freed)
	p.freed = make(chan struct{})
}

// room is how many more messages the node may take now.
func (p *puller) room() int { return p.ex.Room() - int(p.inflight.Load()) }

// run is the node's loop: take held messages by weight while there is
// room, release those held too long without, and every pullIdle read the
// queue for subjects with work and no holder.
func (p *puller) run(ctx context.Context) {
	tick := time.NewTicker(pullIdle)
	defer tick.Stop()
	for ctx.Err() == nil {
		p.takeHeld(ctx)
		select {
		case <-ctx.Done():
		case <-p.poked: // a message held, or one taken handed over
			p.broadcast()
		case <-p.n.room:
			p.broadcast()
		case <-tick.C:
			p.release()
			p.discover(ctx)
		}
	}
}

// takeHeld takes held messages while there is room, each time from the
// tenant weighted chooses among those holding one.
func (p *puller) takeHeld(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range p.holders {
		if len(h.held) > 0 && !p.serves(h.subj) {
			// Its backend's certification went while it held these:
			// back to the queue, for a node that still has it.
			for len(h.held) > 0 {
				_ = h.shift().Nak()
			}
		}
	}
	for p.room() > 0 {
		holding := map[string]bool{}
		for _, h := range p.holders {
			if len(h.held) > 0 {
				holding[h.tenant] = true
			}
		}
		has := func(tenant string) bool { return holding[tenant] }
		tenant := p.fair.choose(has)
		if tenant == "" {
			return
		}
		p.fair.charge(tenant, has)
		m := p.heldOf(tenant).shift()
		p.inflight.Add(1)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.poke()
			defer p.inflight.Add(-1)
			p.n.take(ctx, p.ex, m)
		}()
	}
}

// heldOf is one of tenant's holders with a message, taking its subjects
// (backends) in turn so that none of them starves another. Call with mu.
func (p *puller) heldOf(tenant string) *holder {
	var hs []*holder
	for _, h := range p.holders {
		if len(h.held) > 0 && h.tenant == tenant {
			hs = append(hs, h)
		}
	}
	slices.SortFunc(hs, func(a, b *holder) int { return strings.Compare(a.subj, b.subj) })
	p.turn[tenant]++
	return hs[p.turn[tenant]%len(hs)]
}

// release gives back, for a node with room, what this node has held for
// holdMax without room to take it.
func (p *puller) release() {
	if p.room() > 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range p.holders {
		for len(h.held) > 0 && time.Since(h.held[0].since) > holdMax {
			_ = h.shift().Nak()
			h.released = true
		}
	}
}

// discover starts a holder for every subject this node serves that has
// work in the queue: a wake can be missed, and a message can come back
// (released, or redelivered after a node died holding it).
func (p *puller) discover(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := p.st.Info(rctx, jetstream.WithSubjectFilter(workPrefix+p.n.o.Region+".>"))
	if err != nil {
		if ctx.Err() == nil {
			p.n.log.Warn("cluster: read the region's queue", "error", err)
		}
		return
	}
	for subj, k := range info.State.Subjects {
		if k > 0 {
			p.ensure(ctx, subj)
		}
	}
}

// splitWork parses a work subject of region into its backend and tenant.
func splitWork(region, subj string) (backend, tenant string, ok bool) {
	rest, ok := strings.CutPrefix(subj, workPrefix+region+".")
	if !ok {
		return "", "", false
	}
	backend, tenant, ok = strings.Cut(rest, ".")
	return backend, tenant, ok && tenant != "" && !strings.Contains(tenant, ".")
}
