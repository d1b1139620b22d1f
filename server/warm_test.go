package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/server"
	"github.com/wovyr/wovyr/store"
)

// TestFirstRequestAfterReadyIsWarm: /readyz is 200 only once every
// certified backend's default pool holds its minimum, and the first
// invocation after it is a warm claim, not a prepare.
func TestFirstRequestAfterReadyIsWarm(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	resp, body := h.raw("GET", "/readyz", "", nil, nil)
	var ready struct {
		Status string              `json:"status"`
		Pools  []server.PoolWarmth `json:"pools"`
	}
	if err := json.Unmarshal(body, &ready); err != nil || resp.StatusCode != 200 || ready.Status != "ready" {
		t.Fatalf("/readyz %d %s", resp.StatusCode, body)
	}
	warm := map[string]int{}
	for _, p := range ready.Pools {
		if p.MinWarm != 1 {
			t.Errorf("pool %+v: want the default min_warm 1", p)
		}
		warm[p.Backend] = p.Warm
	}
	if warm["native"] < 1 || warm["wasm"] < 1 || len(warm) != 2 {
		t.Fatalf("/readyz pools %+v; want native and wasm, each warm", ready.Pools)
	}
	if _, err := h.client(aliceToken).Submit(context.Background(), command("/bin/true"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	_, metrics := h.raw("GET", "/metrics", opsToken, nil, nil)
	for _, want := range []string{`wovyr_pool_hits_total{backend="native",template="command:"} 1`, `wovyr_pool_misses_total{backend="native",template="command:"} 0`} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Fatalf("metrics lack %s:\n%s", want, grepLines(metrics, "wovyr_pool_"))
		}
	}
}

// gatedBackend prepares nothing until the test opens its gate, as a VM
// booting for seconds would.
type gatedBackend struct {
	gate chan struct{}
}

func (g *gatedBackend) Name() string               { return "container" }
func (g *gatedBackend) Strength() sandbox.Strength { return sandbox.Container }
func (g *gatedBackend) Kinds() []sandbox.WorkloadKind {
	return []sandbox.WorkloadKind{sandbox.KindCommand}
}
func (g *gatedBackend) Probe(context.Context) sandbox.Capability {
	return sandbox.Capability{Available: true, Version: "gated-1", ConfigHash: "h"}
}
func (g *gatedBackend) Prepare(ctx context.Context, _ sandbox.Template) (sandbox.Sandbox, error) {
	select {
	case <-g.gate:
		return gatedSandbox{}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type gatedSandbox struct{}

func (gatedSandbox) Run(context.Context, *sandbox.Invocation) (*sandbox.Result, error) {
	return &sandbox.Result{}, nil
}
func (gatedSandbox) Destroy(context.Context) error { return nil }

// TestReadyzSaysWhatIsWarming: while a default pool is still filling,
// /readyz is 503 and names it with its count; once it is warm, 200.
func TestReadyzSaysWhatIsWarming(t *testing.T) {
	gb := &gatedBackend{gate: make(chan struct{})}
	h := newHarnessNoWait(t, func(dir string, st *store.Store) []sandbox.Backend {
		rec := cert.Record{Key: cert.Key{Backend: "container", RuntimeVersion: "gated-1", Kernel: cert.Kernel(), ConfigHash: "h"},
			Passed: true, Outcomes: []cert.Outcome{{ID: 1, Name: "fake", Applies: true, Pass: true, ControlFlagged: true}}, At: time.Now()}
		if err := st.PutCert(rec); err != nil {
			t.Fatal(err)
		}
		return []sandbox.Backend{gb}
	})
	want := regexp.MustCompile(`^unavailable: warming the pools: container 0/1 warm$`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, body := h.raw("GET", "/readyz", "", nil, nil)
		var e struct{ Code, Message string }
		json.Unmarshal(body, &e)
		if resp.StatusCode == http.StatusServiceUnavailable && want.MatchString(e.Message) {
			break
		}
		if resp.StatusCode == 200 || time.Now().After(deadline) {
			t.Fatalf("/readyz %d %s; want 503 naming the container pool", resp.StatusCode, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(gb.gate)
	h.waitReady()
}

func grepLines(b []byte, sub string) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
