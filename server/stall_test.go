package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/pool"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/server"
	"github.com/wovyr/wovyr/store"
)

// missingBackend is a certified container backend whose template is not
// on the node: every Prepare fails with the permanent bad-input error an
// OCI backend gives for an image that was removed.
type missingBackend struct{ prepares atomic.Int64 }

func (m *missingBackend) Name() string               { return "container" }
func (m *missingBackend) Strength() sandbox.Strength { return sandbox.Container }
func (m *missingBackend) Kinds() []sandbox.WorkloadKind {
	return []sandbox.WorkloadKind{sandbox.KindCommand}
}
func (m *missingBackend) Probe(context.Context) sandbox.Capability {
	return sandbox.Capability{Available: true, Version: "missing-1", ConfigHash: "h"}
}
func (m *missingBackend) Prepare(context.Context, sandbox.Template) (sandbox.Sandbox, error) {
	m.prepares.Add(1)
	return nil, &sandbox.Error{Class: sandbox.BadInput, Field: "template.image", Msg: `no template "base" on this node`,
		Err: errors.New("build it: wovyr image build base")}
}

// TestStalledPoolInBackendsAndMetrics: issue #25 item 3 — a pool whose
// template can never be prepared stops retrying, says why in /v1/backends
// (in full to an admin, in its public form to a tenant) and in
// wovyr_pool_stalled, and an invocation routed to it fails at once with
// the typed reason without another prepare.
func TestStalledPoolInBackendsAndMetrics(t *testing.T) {
	mb := &missingBackend{}
	h := newHarnessWith(t, testConfig(), "", func(dir string, st *store.Store) []sandbox.Backend {
		rec := cert.Record{Key: cert.Key{Backend: "container", RuntimeVersion: "missing-1", Kernel: cert.Kernel(), ConfigHash: "h"},
			Passed: true, Outcomes: []cert.Outcome{{ID: 1, Name: "fake", Applies: true, Pass: true, ControlFlagged: true}}, At: time.Now()}
		if err := st.PutCert(rec); err != nil {
			t.Fatal(err)
		}
		return []sandbox.Backend{mb}
	})
	key := pool.KeyFor("container", sandbox.Template{Kind: sandbox.KindCommand}).String()
	const full = `bad-input (template.image): no template "base" on this node: build it: wovyr image build base`

	// The first reconcile after the stall sets its retry time.
	var pools []server.PoolStatus
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		pools = containerPools(t, h, opsToken)
		if len(pools) == 1 && pools[0].RetryAt != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("container pools %+v; want one stalled pool with a retry time", pools)
		}
	}
	got := pools[0]
	if got.Since == nil || got.RetryAt.Before(got.Since.Add(10*time.Minute)) {
		t.Fatalf("since %v, retry at %v: want a retry 10m after the stall", got.Since, got.RetryAt)
	}
	got.Since, got.RetryAt = nil, nil
	want := server.PoolStatus{Key: key, Template: "command:", State: "stalled", Class: "bad-input", Field: "template.image", Reason: full}
	if got != want {
		t.Fatalf("admin reads %+v\nwant %+v", got, want)
	}
	tp := containerPools(t, h, aliceToken)
	if len(tp) != 1 || tp[0].Reason != `bad-input (template.image): no template "base" on this node` {
		t.Fatalf("tenant reads %+v; want the public reason only", tp)
	}

	_, metrics := h.raw("GET", "/metrics", opsToken, nil, nil)
	line := `wovyr_pool_stalled{backend="container",field="template.image",reason="bad-input",template="command:"} 1`
	if !bytes.Contains(metrics, []byte(line+"\n")) {
		t.Fatalf("metrics lack %s:\n%s", line, grepLines(metrics, "wovyr_pool_stalled"))
	}
	if !bytes.Contains(metrics, []byte(`wovyr_pool_stalled{backend="native",field="",reason="",template="command:"} 0`+"\n")) {
		t.Fatalf("a healthy pool should read 0:\n%s", grepLines(metrics, "wovyr_pool_stalled"))
	}

	// An invocation for the stalled pool fails at once, typed, and
	// prepares nothing more.
	inv := command("/bin/true")
	inv.Policy.Preference = sandbox.Container
	rec, err := h.client(aliceToken).Submit(context.Background(), inv, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != "failed" || rec.Result == nil || rec.Result.Class != sandbox.BadInput ||
		rec.Result.Error != `bad-input (template.image): no template "base" on this node` {
		t.Fatalf("record %s %+v; want failed with the template's bad-input reason", rec.State, rec.Result)
	}
	if n := mb.prepares.Load(); n != 1 {
		t.Fatalf("%d prepares, want 1: a stalled pool retries only when its template can have changed", n)
	}
}

// containerPools reads the container backend's pools from /v1/backends.
func containerPools(t *testing.T, h *harness, token string) []server.PoolStatus {
	t.Helper()
	resp, body := h.raw("GET", "/v1/backends", token, nil, nil)
	var sts []server.BackendStatus
	if err := json.Unmarshal(body, &sts); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/v1/backends %d: %v %s", resp.StatusCode, err, body)
	}
	for _, st := range sts {
		if st.Name == "container" {
			return st.Pools
		}
	}
	t.Fatalf("no container backend in %s", body)
	return nil
}
