package cluster

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// lostAck is a JetStream whose first lose publishes reach the stream but
// whose acks are lost, as when a stream's leader moves.
type lostAck struct {
	jetstream.JetStream
	lose atomic.Int32
}

func (l *lostAck) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	ack, err := l.JetStream.PublishMsg(ctx, m, opts...)
	if err == nil && l.lose.Add(-1) >= 0 {
		return nil, errors.New("nats: timeout")
	}
	return ack, err
}

// counting accepts every invocation with a queued record and counts.
type counting struct{ n atomic.Int64 }

func (c *counting) Accept(_ context.Context, inv *sandbox.Invocation) (store.Invocation, error) {
	c.n.Add(1)
	return store.Invocation{ID: inv.ID, Tenant: inv.Tenant, State: store.Queued, Where: store.Where{Region: "r2", Node: "exec"}}, nil
}
func (c *counting) Record(context.Context, string, string, time.Duration) (store.Invocation, error) {
	return store.Invocation{}, store.ErrNotFound
}
func (c *counting) Cancel(context.Context, string, string) (store.Invocation, error) {
	return store.Invocation{}, store.ErrNotFound
}
func (c *counting) Follow(context.Context, string, string, store.State, int, time.Duration) (store.Invocation, []sandbox.Chunk, error) {
	return store.Invocation{}, nil, store.ErrNotFound
}
func (c *counting) Certified(context.Context) []Backend {
	return []Backend{{Name: "native", Strength: sandbox.Native, Kinds: []sandbox.WorkloadKind{sandbox.KindCommand}}}
}
func (c *counting) Room() int               { return 8 }
func (c *counting) GPUs() []GPU             { return nil }
func (c *counting) Weights() map[string]int { return map[string]int{"alice": 1} }

// TestLostPublishAck: a dispatch whose publish reached the stream but
// whose ack was lost publishes again under the same message id, learns
// from the duplicate that the first was stored, and answers with the
// taker's record: neither a 503 for work that runs anyway nor a second
// run.
func TestLostPublishAck(t *testing.T) {
	ns, err := StartEmbedded(EmbeddedOptions{Name: "lost-ack", Listen: "127.0.0.1:0", StoreDir: filepath.Join(t.TempDir(), "nats")})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	api, err := Connect(ctx, Options{Name: "api", Region: "r1", URL: ns.ClientURL(), Heartbeat: 200 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	exec, err := Connect(ctx, Options{Name: "exec", Region: "r2", URL: ns.ClientURL(), Heartbeat: 200 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ex := &counting{}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); exec.Serve(sctx, ex) }()
	defer func() { stop(); <-done; exec.Close() }()
	for len(api.Live()) == 0 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	lossy := &lostAck{JetStream: api.js}
	lossy.lose.Store(1)
	api.js = lossy
	inv := &sandbox.Invocation{ID: "lostack1", Tenant: "alice", Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/true"}},
		Policy: sandbox.Policy{Trust: sandbox.Trusted}}
	rec, err := api.Dispatch(ctx, "r2", inv, 0)
	if err != nil || rec.ID != "lostack1" || rec.Node != "exec" {
		t.Fatalf("dispatch with a lost ack: %+v %v", rec, err)
	}
	time.Sleep(300 * time.Millisecond) // a second message, if any, would be taken by now
	if n := ex.n.Load(); n != 1 {
		t.Fatalf("accepted %d times, want 1", n)
	}
	// A second dispatch of the id is still the conflict it was.
	if _, err := api.Dispatch(ctx, "r2", inv, 0); sandbox.ClassOf(err) != sandbox.Conflict {
		t.Fatalf("the same id again: %v, want a conflict", err)
	}
}
