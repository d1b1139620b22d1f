package plugin

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/egress/egresstest"
	"github.com/wovyr/wovyr/egress/netns"
	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/plugin/plugintest"
	"github.com/wovyr/wovyr/sandbox"
)

// TestFetchThroughEgress: fetchdemo (JavaScript) fetches through
// wovyr:host/http on the egress test rig (namespaces this test makes; no
// packet can leave the machine). Under a policy allowing allowed.test the
// name answers over http and https, through the egress proxy; every other
// name, an IP literal, a metadata address (even by an allowed name) and a
// call without a policy are denied by the proxy; a body over the cap, a bad
// URL, a reserved header and a 17th request are the interface's errors.
// Afterwards no slot namespace is left.
func TestFetchThroughEgress(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (CI runs as root)")
	}
	wasm := plugintest.JS(t, plugintest.Jco(t), "fetchdemo")
	ctx := context.Background()
	rig, svc, stop, err := egresstest.NewWithService(ctx, "pl", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()
	m := signed("fetchdemo", wasm, "wovyr:host/http")
	dir := t.TempDir()
	if _, err := newHost(t, Config{Dir: dir}).Load(m, wasm); sandbox.ClassOf(err) != sandbox.Unenforceable ||
		!strings.Contains(err.Error(), "this node has no egress service") {
		t.Fatalf("load without egress: %v", err)
	}
	h := newHost(t, Config{Dir: dir, Egress: svc, FetchRoots: rig.CAPEM, FetchMaxBody: 64 << 10})
	if _, err := h.Load(m, wasm); err != nil {
		t.Fatal(err)
	}
	policy := func(rules ...netpolicy.Rule) CallOptions { return CallOptions{Network: netpolicy.Policy{Allow: rules}} }
	web := policy(netpolicy.Rule{Host: "allowed.test", Ports: []uint16{80, 443}}, netpolicy.Rule{Host: "meta.test", Ports: []uint16{80}})
	fetch := func(url string, opts CallOptions) string {
		t.Helper()
		r, err := h.Call(ctx, "alice", "fetchdemo", "get", []byte(`["`+url+`"]`), opts)
		if err != nil {
			t.Fatalf("get %s: %v", url, err)
		}
		if r.End != "ok" {
			t.Fatalf("get %s ended %s: %s", url, r.End, r.Error)
		}
		return string(r.Value)
	}
	denied := func(target string) string {
		return `{"err":"denied: the call's network policy does not allow ` + target + `"}`
	}
	for _, c := range []struct {
		url  string
		opts CallOptions
		want string
	}{
		{"http://allowed.test/", web, `{"ok":"200 http host=allowed.test sni= local=10.213.200.1:80\n"}`},
		{"https://allowed.test/", web, `{"ok":"200 https host=allowed.test sni=allowed.test local=10.213.200.1:443\n"}`},
		{"http://allowed.test/", CallOptions{}, denied("allowed.test")},
		{"http://other.test/", web, denied("other.test")},
		{"https://other.test/", web, denied("other.test")},
		{"http://allowed.test:7004/", web, denied("allowed.test:7004")},
		{"http://10.213.200.1/", web, denied("10.213.200.1")},
		{"http://169.254.169.254/", web, denied("169.254.169.254")},
		{"http://meta.test/", web, denied("meta.test")},
		{"http://allowed.test/big", web, `{"err":"too-large: 65536"}`},
		{"ftp://allowed.test/", web, `{"err":"invalid: the url's scheme must be http or https"}`},
	} {
		if got := fetch(c.url, c.opts); got != c.want {
			t.Errorf("get %s (policy %v) = %s, want %s", c.url, c.opts.Network.Allow, got, c.want)
		}
	}
	r, err := h.Call(ctx, "alice", "fetchdemo", "burst", []byte(`["http://allowed.test/", 17]`), web)
	if err != nil || r.End != "ok" {
		t.Fatalf("burst: %v %+v", err, r)
	}
	if want := `[` + strings.Repeat(`"200",`, 16) + `"too-many"]`; string(r.Value) != want {
		t.Errorf("burst = %s, want %s", r.Value, want)
	}
	h.Close()
	if left, err := netns.List("wovyr-pl-s"); err != nil || len(left) != 0 {
		t.Errorf("slot namespaces left after the host closed: %v %v", left, err)
	}
}
