package server_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// hostBackend is a stronger backend whose every failure names host paths,
// as real probes and prepares do.
type hostBackend struct {
	name     string
	strength sandbox.Strength
	capa     sandbox.Capability
	prepErr  error
}

func (b *hostBackend) Name() string               { return b.name }
func (b *hostBackend) Strength() sandbox.Strength { return b.strength }
func (b *hostBackend) Kinds() []sandbox.WorkloadKind {
	return []sandbox.WorkloadKind{sandbox.KindCommand}
}
func (b *hostBackend) Probe(context.Context) sandbox.Capability { return b.capa }
func (b *hostBackend) Prepare(context.Context, sandbox.Template) (sandbox.Sandbox, error) {
	return nil, b.prepErr
}

// absPath finds an absolute path in a message: a slash that starts a word.
var absPath = regexp.MustCompile(`(^|[\s"'(\[=:,;])/[^\s"']`)

// assertTenantSafe fails if msg, shown to a tenant, holds the state dir or
// any absolute host path.
func assertTenantSafe(t *testing.T, where, msg, dir string) {
	t.Helper()
	if strings.Contains(msg, dir) || absPath.MatchString(msg) || strings.Contains(msg, "wovyr image build") {
		t.Errorf("%s shows the tenant host details: %q", where, msg)
	}
}

// Regression for issue #26 item 2: a floor-unmet answer to a tenant listed
// each stronger backend's probe reason verbatim (the state dir's layout and
// the operator's commands), and so did records of sandboxes that failed to
// start. Tenants now read short, path-free reasons; the operator's views
// (the log, admin /v1/backends) keep the full ones.
func TestTenantErrorsNameNoHostPaths(t *testing.T) {
	var images string
	h := newHarnessWith(t, testConfig(), "", func(dir string, st *store.Store) []sandbox.Backend {
		images = filepath.Join(dir, "images", "microvm")
		ctr := &hostBackend{name: "container", strength: sandbox.Container,
			capa:    sandbox.Capability{Available: true, Version: "fake-1", ConfigHash: "h"},
			prepErr: sandbox.Wrap(sandbox.BackendFailure, &fs.PathError{Op: "mkdir", Path: filepath.Join(dir, "run", "sb", "x"), Err: fs.ErrPermission}, "prepare: bundle")}
		rec := cert.Record{Key: cert.Key{Backend: "container", RuntimeVersion: "fake-1", Kernel: cert.Kernel(), ConfigHash: "h"},
			Passed: true, Outcomes: []cert.Outcome{{ID: 1, Name: "fake", Applies: true, Pass: true, ControlFlagged: true}}, At: time.Now()}
		if err := st.PutCert(rec); err != nil {
			t.Fatal(err)
		}
		return []sandbox.Backend{ctr,
			&hostBackend{name: "gvisor", strength: sandbox.GVisor, capa: sandbox.Capability{Available: true, Version: "fake-2"}},
			&hostBackend{name: "microvm", strength: sandbox.MicroVM, capa: sandbox.Capability{
				Reason: "vmimage: no image in " + images + " (run wovyr image build microvm): open " + images + "/image.json: no such file or directory"}},
		}
	})
	ctx := context.Background()
	alice := h.client(aliceToken)
	inv := func(trust sandbox.TrustClass, pref sandbox.Strength) *sandbox.Invocation {
		return &sandbox.Invocation{Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/true"}},
			Policy: sandbox.Policy{Trust: trust, Preference: pref}}
	}

	// floor-unmet, in the API body and through the client.
	_, err := alice.Submit(ctx, inv(sandbox.Untrusted, 0), 10*time.Second)
	want := "floor-unmet: no usable backend at or above gvisor for a command workload; gvisor: not certified on this node; microvm: not available on this node"
	var ce *client.Error
	if !errAs(err, &ce) || ce.Code != sandbox.FloorUnmet || ce.Message != want {
		t.Fatalf("untrusted submit: %v, want %q", err, want)
	}
	body, _ := json.Marshal(inv(sandbox.Untrusted, 0))
	resp, raw := h.raw(http.MethodPost, "/v1/invocations", aliceToken, strings.NewReader(string(body)), nil)
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	assertTenantSafe(t, "floor-unmet body", string(raw), h.dir)

	// A sandbox that fails to start: the record, the events, the client.
	got, err := alice.Submit(ctx, inv(sandbox.Internal, sandbox.Container), 10*time.Second)
	if err != nil || got.Result == nil || got.Result.Class != sandbox.BackendFailure {
		t.Fatalf("container submit: %+v %v, want a backend-failure record", got, err)
	}
	assertTenantSafe(t, "backend-failure record", got.Result.Error, h.dir)
	if got.Result.Error != "backend-failure: the sandbox machinery failed on this node (not the workload); the operator's log has the detail" {
		t.Errorf("backend-failure record says %q", got.Result.Error)
	}
	resp, raw = h.raw(http.MethodGet, "/v1/invocations/"+got.ID+"/events", aliceToken, nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), "event: result") {
		t.Fatalf("events: %d %s", resp.StatusCode, raw)
	}
	assertTenantSafe(t, "events", string(raw), h.dir)
	_, err = alice.Run(ctx, inv(sandbox.Internal, sandbox.Container))
	if err == nil {
		t.Fatal("run on the failing container backend succeeded")
	}
	assertTenantSafe(t, "client.Run error", err.Error(), h.dir)

	// /v1/backends: the tenant learns availability; the admin the reason.
	for token, full := range map[string]bool{aliceToken: false, opsToken: true} {
		resp, raw := h.raw(http.MethodGet, "/v1/backends", token, nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("backends: %d %s", resp.StatusCode, raw)
		}
		if has := strings.Contains(string(raw), images); has != full {
			t.Errorf("backends for admin=%v: shows the probe's path %v: %s", full, has, raw)
		}
		if !full {
			assertTenantSafe(t, "tenant /v1/backends", string(raw), h.dir)
		}
	}
}

func errAs(err error, target **client.Error) bool {
	for err != nil {
		if e, ok := err.(*client.Error); ok {
			*target = e
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}
