package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/server"
)

// dashState is the part of /ui/state this test reads.
type dashState struct {
	Ready    bool `json:"ready"`
	Backends []struct {
		Name        string     `json:"name"`
		Strength    string     `json:"strength"`
		Available   bool       `json:"available"`
		Certified   bool       `json:"certified"`
		CertifiedAt *time.Time `json:"certified_at"`
	} `json:"backends"`
	Battery []struct {
		ID    int               `json:"id"`
		Name  string            `json:"name"`
		Cells map[string]string `json:"cells"`
	} `json:"battery"`
	Tenants []struct {
		Name        string `json:"name"`
		Weight      int64  `json:"weight"`
		Admitted    uint64 `json:"admitted"`
		WaitSamples int    `json:"wait_samples"`
	} `json:"tenants"`
	Invocations []struct {
		ID       string `json:"id"`
		Tenant   string `json:"tenant"`
		Backend  string `json:"backend"`
		State    string `json:"state"`
		ExitCode int    `json:"exit_code"`
		Total    int64  `json:"total"`
		Run      int64  `json:"run"`
	} `json:"invocations"`
	Sessions []any `json:"sessions"`
}

func get(t *testing.T, url, token string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// TestDashboard: /ui serves its embedded page to anyone, locked to its own
// origin by its CSP; its feed /ui/state is admin only, shows the
// certified backends with their battery matrix and the tenants, and an
// invocation once it has run.
func TestDashboard(t *testing.T) {
	cfg := testConfig()
	h := startHarness(t, cfg, "", nil, func(o *server.Options) {
		f, err := server.NewFair(o.Config)
		if err != nil {
			t.Fatal(err)
		}
		o.Admission = f
	})
	h.waitReady()

	resp, body := get(t, h.url+"/ui/", "")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(string(body), `<script src="app.js" defer></script>`) {
		t.Fatalf("/ui/: %d %s\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "default-src 'none'; script-src 'self';") {
		t.Errorf("CSP %q", csp)
	}
	if resp, _ := get(t, h.url+"/ui", ""); resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("/ui: %d → %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, body := get(t, h.url+"/ui/app.js", ""); resp.StatusCode != 200 || !strings.Contains(string(body), `fetch("/ui/state"`) {
		t.Errorf("/ui/app.js: %d", resp.StatusCode)
	}
	for token, want := range map[string]int{"": 401, aliceToken: 403, "wrong": 401} {
		if resp, body := get(t, h.url+"/ui/state", token); resp.StatusCode != want {
			t.Errorf("/ui/state with %q: %d %s, want %d", token, resp.StatusCode, body, want)
		}
	}

	state := func() dashState {
		t.Helper()
		resp, body := get(t, h.url+"/ui/state", opsToken)
		if resp.StatusCode != 200 {
			t.Fatalf("/ui/state: %d %s", resp.StatusCode, body)
		}
		var st dashState
		if err := json.Unmarshal(body, &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := state()
	certified := map[string]string{}
	for _, b := range st.Backends {
		if b.Certified && b.CertifiedAt != nil {
			certified[b.Name] = b.Strength
		}
	}
	if len(certified) != 2 || certified["native"] != "native" || certified["wasm"] != "wasm" || !st.Ready {
		t.Fatalf("certified backends %v (ready %v), want native and wasm", certified, st.Ready)
	}
	if len(st.Battery) < 20 {
		t.Fatalf("battery matrix has %d rows", len(st.Battery))
	}
	for _, row := range st.Battery {
		for b, v := range row.Cells {
			if v != "pass" && v != "n/a" {
				t.Errorf("probe #%d %s on %s: %q in a passed certification", row.ID, row.Name, b, v)
			}
		}
	}
	if len(st.Tenants) != 3 || len(st.Invocations) != 0 || len(st.Sessions) != 0 {
		t.Fatalf("tenants %+v, invocations %+v, sessions %+v", st.Tenants, st.Invocations, st.Sessions)
	}

	rec, err := h.client(aliceToken).Submit(context.Background(), &sandbox.Invocation{
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/echo", "hi"}},
		Policy:   sandbox.Policy{Trust: sandbox.Trusted},
	}, 30*time.Second)
	if err != nil || rec.State != client.StateDone {
		t.Fatalf("submit: %v %+v", err, rec)
	}
	st = state()
	if len(st.Invocations) != 1 {
		t.Fatalf("invocations after one ran: %+v", st.Invocations)
	}
	inv := st.Invocations[0]
	if inv.ID != rec.ID || inv.Tenant != "alice" || inv.Backend != "native" || inv.State != "done" || inv.ExitCode != 0 ||
		inv.Run <= 0 || inv.Total < inv.Run {
		t.Errorf("invocation %+v, want %s by alice on native, done", inv, rec.ID)
	}
	for _, tn := range st.Tenants {
		want := map[string]int{"alice": 1}[tn.Name]
		if tn.WaitSamples != want || tn.Admitted != uint64(want) {
			t.Errorf("tenant %+v: want %d admitted and %d wait samples", tn, want, want)
		}
	}
}
