package cluster_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wovyr/wovyr/cluster"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// acceptAll is an Executor that records nothing and runs nothing: it
// answers every dispatch with a queued record at once, so that what is
// measured is the cluster's own path.
// With a store, it commits each one's queued record there first, as a
// daemon does before it answers.
type acceptAll struct {
	n     atomic.Int64
	store *store.Store
}

func (a *acceptAll) Accept(_ context.Context, inv *sandbox.Invocation) (store.Invocation, error) {
	a.n.Add(1)
	w := store.Where{Region: "r2", Node: "exec"}
	if a.store != nil {
		if err := a.store.BeginAt(inv, store.Queued, time.Now(), w); err != nil {
			return store.Invocation{}, err
		}
	}
	return store.Invocation{ID: inv.ID, Tenant: inv.Tenant, State: store.Queued, Where: w}, nil
}

func (a *acceptAll) Record(context.Context, string, string, time.Duration) (store.Invocation, error) {
	return store.Invocation{}, store.ErrNotFound
}

func (a *acceptAll) Cancel(context.Context, string, string) (store.Invocation, error) {
	return store.Invocation{}, store.ErrNotFound
}

func (a *acceptAll) Follow(context.Context, string, string, store.State, int, time.Duration) (store.Invocation, []sandbox.Chunk, error) {
	return store.Invocation{}, nil, store.ErrNotFound
}

func (a *acceptAll) GPUs() []cluster.GPU { return nil }

func (a *acceptAll) Room() int { return 64 }

func (a *acceptAll) Weights() map[string]int { return map[string]int{"alice": 1} }

func (a *acceptAll) Certified(context.Context) []cluster.Backend {
	return []cluster.Backend{{Name: "native", Strength: sandbox.Native, Kinds: []sandbox.WorkloadKind{sandbox.KindCommand}}}
}

// pair is an API node and an executing node of another region over one
// embedded NATS server, the executor a stand-in.
func pair(tb testing.TB) (api *cluster.Node, ex *acceptAll) { return pairWith(tb, &acceptAll{}) }

// pairWith is pair with ex as the executing node's executor.
func pairWith(tb testing.TB, ex *acceptAll) (*cluster.Node, *acceptAll) {
	tb.Helper()
	ns, err := cluster.StartEmbedded(cluster.EmbeddedOptions{Name: "bench", Listen: "127.0.0.1:0", StoreDir: filepath.Join(tb.TempDir(), "nats")})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(ns.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	api, err := cluster.Connect(ctx, cluster.Options{Name: "api", Region: "r1", URL: ns.ClientURL(), Heartbeat: 200 * time.Millisecond, Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(api.Close)
	exec, err := cluster.Connect(ctx, cluster.Options{Name: "exec", Region: "r2", URL: ns.ClientURL(), Heartbeat: 200 * time.Millisecond, Capacity: 64, Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); exec.Serve(sctx, ex) }()
	tb.Cleanup(func() { stop(); <-done; exec.Close() })
	for len(api.Live()) == 0 {
		if ctx.Err() != nil {
			tb.Fatal("the executing node never registered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return api, ex
}

func inv(i int64) *sandbox.Invocation {
	v := command()
	v.ID, v.Tenant = "bench-"+itoa(i), "alice"
	return v
}

func itoa(i int64) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		if i /= 10; i == 0 {
			return string(b[n:])
		}
	}
}

// BenchmarkDispatchPath is one dispatch through NATS and JetStream,
// without a sandbox: publish to the region's stream, the executing node's
// claim and answer, the ack; with a store, the executing node's durable
// queued record too. Parallel: accepted dispatches per second.
func BenchmarkDispatchPath(b *testing.B) {
	b.Run("no-store", func(b *testing.B) { benchDispatchPath(b, &acceptAll{}) })
	// The executing node commits each accepted invocation's queued record
	// to its bbolt store before it answers, as a daemon does: the whole
	// accepted path but the sandbox.
	b.Run("store", func(b *testing.B) {
		st, err := store.Open(b.TempDir(), time.Second)
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		benchDispatchPath(b, &acceptAll{store: st})
	})
}

func benchDispatchPath(b *testing.B, ex *acceptAll) {
	api, _ := pairWith(b, ex)
	ctx := context.Background()
	var next atomic.Int64
	b.SetParallelism(8)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rec, err := api.Dispatch(ctx, "r2", inv(next.Add(1)), 0)
			if err != nil || rec.State != store.Queued {
				b.Errorf("dispatch: %+v %v", rec, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "dispatches/s")
}

// TestDispatchIsTakenOnce: every dispatch is accepted exactly once, none
// dropped — the claim and the ack after it.
func TestDispatchIsTakenOnce(t *testing.T) {
	api, ex := pair(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range int64(200) {
		rec, err := api.Dispatch(ctx, "r2", inv(i), 0)
		if err != nil || rec.ID != "bench-"+itoa(i) || rec.Node != "exec" {
			t.Fatalf("dispatch %d: %+v %v", i, rec, err)
		}
	}
	if n := ex.n.Load(); n != 200 {
		t.Fatalf("accepted %d times, want 200", n)
	}
	// A second dispatch of the same id is not run again.
	if _, err := api.Dispatch(ctx, "r2", inv(7), 0); err == nil {
		t.Fatal("the same id was dispatched twice")
	}
	if n := ex.n.Load(); n != 200 {
		t.Fatalf("accepted %d times after a duplicate, want 200", n)
	}
}

var quiet = slog.New(slog.DiscardHandler)
