package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Info is a node's registry entry.
type Info struct {
	Name     string    `json:"name"`
	Region   string    `json:"region"`
	Zone     string    `json:"zone,omitempty"`
	Backends []Backend `json:"backends"`
	// GPUs are the node's devices, as GPU requests match them.
	GPUs     []GPU     `json:"gpus,omitempty"`
	Capacity int       `json:"capacity"`
	Started  time.Time `json:"started"`
	// Seen is when the node wrote this entry: the heartbeat.
	Seen time.Time `json:"seen"`
}

// registry is the live view of every region's wovyr-nodes bucket, kept by
// a KV watcher per bucket and, in case a watcher stalls (its consumer lost
// while a NATS server of the bucket stops), by re-reading every entry each
// ttl/3. An entry counts as live while its heartbeat is younger than ttl:
// the bucket's own expiry removes old entries without telling watchers,
// and a region whose bucket cannot be read (its NATS cluster gone) has
// its entries age out.
type registry struct {
	ttl  time.Duration
	log  *slog.Logger
	ctx  context.Context // the watchers' and pollers'
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu   sync.Mutex
	byID map[string]Info
}

func newRegistry(ctx context.Context, ttl time.Duration, log *slog.Logger) *registry {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return &registry{ttl: ttl, log: log, ctx: rctx, stop: cancel, byID: map[string]Info{}}
}

// close stops the watchers and the pollers and waits for them.
func (r *registry) close() {
	r.stop()
	r.wg.Wait()
}

// watch keeps kv's entries in the view until the registry closes; it
// returns once the watcher has its initial values, or when ctx ends.
func (r *registry) watch(ctx context.Context, kv jetstream.KeyValue) error {
	wctx, cancel := context.WithCancel(r.ctx)
	w, err := kv.WatchAll(wctx)
	if err != nil {
		cancel()
		return fmt.Errorf("cluster: watch registry: %w", err)
	}
	ready := make(chan struct{})
	r.wg.Go(func() {
		defer cancel()
		once := sync.OnceFunc(func() { close(ready) })
		defer once()
		for {
			r.follow(wctx, w, once)
			w.Stop()
			if w = r.rewatch(wctx, kv); w == nil {
				return
			}
		}
	})
	select {
	case <-ready:
	case <-ctx.Done():
		cancel() // the goroutine stops its watcher and makes no other
		return ctx.Err()
	}
	r.wg.Go(func() { every(r.ctx, max(r.ttl/3, 10*time.Millisecond), func() { r.poll(kv) }) })
	return nil
}

// every calls fn every d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// follow applies w's updates until the registry closes, w ends, or w is
// silent for two ttls: every live node's entry is renewed each heartbeat,
// so a silent watcher has lost its consumer (a NATS server restarted
// under it) or its bucket has no live node; either way a new one re-reads
// every entry. ready is called once the initial values are in.
func (r *registry) follow(ctx context.Context, w jetstream.KeyWatcher, ready func()) {
	quiet := time.NewTimer(2 * r.ttl)
	defer quiet.Stop()
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil { // the initial values are in
				ready()
				continue
			}
			r.apply(e)
			quiet.Reset(2 * r.ttl)
		case <-quiet.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// rewatch makes a new watcher of kv, retrying every ttl/3; nil once ctx
// ends.
func (r *registry) rewatch(ctx context.Context, kv jetstream.KeyValue) jetstream.KeyWatcher {
	for ctx.Err() == nil {
		if w, err := kv.WatchAll(ctx); err == nil {
			return w
		}
		select {
		case <-ctx.Done():
		case <-time.After(max(r.ttl/3, 10*time.Millisecond)):
		}
	}
	return nil
}

// poll re-reads every entry, bounded by two ttls (a loaded NATS may take
// longer than a beat).
func (r *registry) poll(kv jetstream.KeyValue) {
	ctx, cancel := context.WithTimeout(r.ctx, 2*r.ttl)
	defer cancel()
	keys, err := kv.Keys(ctx)
	if err != nil {
		return // none, or NATS trouble: the watcher's view stands
	}
	for _, k := range keys {
		if e, err := kv.Get(ctx, k); err == nil {
			r.apply(e)
		}
	}
}

func (r *registry) apply(e jetstream.KeyValueEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(r.byID, e.Key())
		return
	}
	if old, ok := r.byID[e.Key()]; ok && !e.Created().After(old.Seen) {
		return // the poller read what the watcher had, or older
	}
	var in Info
	if err := json.Unmarshal(e.Value(), &in); err != nil {
		r.log.Warn("cluster registry: unreadable entry", "key", e.Key(), "error", err)
		return
	}
	// The bucket's time, not the writer's clock, says how fresh it is.
	in.Seen = e.Created()
	r.byID[e.Key()] = in
}

func (r *registry) live(now time.Time) []Info {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Info
	for _, in := range r.byID {
		if now.Sub(in.Seen) < r.ttl {
			out = append(out, in)
		}
	}
	slices.SortFunc(out, func(a, b Info) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// isLive reports whether node name is live in the view.
func (r *registry) isLive(name string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, in := range r.byID {
		if in.Name == name && now.Sub(in.Seen) < r.ttl {
			return true
		}
	}
	return false
}

func (r *registry) liveRegions(now time.Time) []string {
	var out []string
	for _, in := range r.live(now) {
		if in.Region != "" {
			out = append(out, in.Region)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func encode(v any) ([]byte, error) { return json.Marshal(v) }
