package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/sandbox"
)

// TestDashboardInChromium drives the dashboard of a real `wovyr serve` in
// headless Chromium: the page takes the admin token from its fragment,
// shows the node's certified backend and its battery matrix, and shows an
// invocation once it has run, on the same page without a reload.
func TestDashboardInChromium(t *testing.T) {
	chrome, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (Debian package chromium; `make deps` installs it)")
	}
	wovyr, state := certifiedNative(t, "wovyr-ui-test-")
	conf := fmt.Sprintf(`{"cgroup_reconcile": "owned", "tenants": [
		{"name": "ops", "admin": true, "token_sha256": [%q]},
		{"name": "acme", "weight": 2, "token_sha256": [%q]}]}`, config.HashToken("ops-token"), config.HashToken("acme-token"))
	d := startDaemonConfig(t, wovyr, state, conf)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Nothing but the daemon on loopback: no name resolves, no component
	// updates or other background fetches.
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1360, 1700),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-domain-reliability", true), chromedp.Flag("no-pings", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()

	native := chromedp.CSS(`#backends tbody tr[data-key="native"]`)
	if err := chromedp.Do(bctx, chromedp.Navigate(d.url+"/ui/#token=ops-token"), chromedp.WaitVisible(native)); err != nil {
		t.Fatalf("load the dashboard: %v\n%s", err, d.log)
	}
	row := run(t, bctx, chromedp.Text(native))
	probes := run(t, bctx, chromedp.Evaluate[int](`document.querySelectorAll('#battery tr[data-key="native"] .chip.pass').length`))
	failing := run(t, bctx, chromedp.Evaluate[int](`document.querySelectorAll("#battery .chip.fail, #battery .chip.unflagged").length`))
	address := run(t, bctx, chromedp.Evaluate[string](`location.href`))
	run(t, bctx, chromedp.Evaluate[bool](`window.sameLoad = true`))
	// The row: backend, strength, available, certified, certified when.
	if f := strings.Fields(row); len(f) < 5 || f[0] != "native" || f[1] != "native" || f[2] != "yes" || f[3] != "yes" {
		t.Errorf("native's row %q, want native native yes yes …", row)
	}
	if want := passedInFeed(t, d.url); probes != want || want < 10 || failing != 0 {
		t.Errorf("battery matrix: %d probes passed on native (the feed says %d), %d failed or unflagged", probes, want, failing)
	}
	if strings.Contains(address, "token") {
		t.Errorf("the token stayed in the address bar: %s", address)
	}

	rec, err := client.New(d.url, "acme-token", nil).Submit(ctx, &sandbox.Invocation{
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/echo", "hi"}},
		Policy:   sandbox.Policy{Trust: sandbox.Trusted},
	}, 30*time.Second)
	if err != nil || rec.State != client.StateDone {
		t.Fatalf("submit: %v %+v", err, rec)
	}
	inv := chromedp.CSS(fmt.Sprintf(`#invocations tbody tr[data-key=%q]`, rec.ID))
	if err := chromedp.Do(bctx, chromedp.WaitVisible(inv)); err != nil {
		t.Fatalf("the invocation never showed: %v", err)
	}
	invRow := run(t, bctx, chromedp.Text(inv))
	sameLoad := run(t, bctx, chromedp.Evaluate[bool](`window.sameLoad === true`))
	if f := strings.Fields(invRow); len(f) < 5 || f[0] != rec.ID || f[1] != "acme" || f[2] != "native" || f[3] != "done" || f[4] != "0" {
		t.Errorf("invocation row %q, want %s acme native done 0 …", invRow, rec.ID)
	}
	if !sameLoad {
		t.Error("the page reloaded to show the invocation")
	}
}

// run runs one browser action and returns its value, failing t on error.
func run[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// passedInFeed counts the probes /ui/state says native passed.
func passedInFeed(t *testing.T, url string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url+"/ui/state", nil)
	req.Header.Set("Authorization", "Bearer ops-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Battery []struct {
			Cells map[string]string `json:"cells"`
		} `json:"battery"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range st.Battery {
		if p.Cells["native"] == "pass" {
			n++
		}
	}
	return n
}
