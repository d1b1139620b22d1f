package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/plugin"
	"github.com/wovyr/wovyr/plugin/plugintest"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/server"
)

// TestPluginCLI: install, list, call (typed arguments, a bad one, a trap)
// and rm, as an operator and a user type them, against a daemon whose
// plugin host trusts the test key from its config.
func TestPluginCLI(t *testing.T) {
	wasm, err := os.ReadFile("../../plugin/testdata/calc/calc.wasm")
	if err != nil {
		t.Fatal(err)
	}
	run, comp, manifest := pluginDaemon(t, "calc", wasm)
	if _, errs, code := run("tok", "install", comp, "--manifest", manifest); code != exitBackendFailure || errs != "wovyr: forbidden: this needs an admin token\n" {
		t.Fatalf("install as alice: %d %q", code, errs)
	}
	if out, errs, code := run("ops-tok", "install", comp, "--manifest", manifest); code != 0 || !strings.Contains(out, `"signed_by": "ops"`) {
		t.Fatalf("install: %d %q %q", code, out, errs)
	}
	for _, s := range []struct {
		args           []string
		stdout, stderr string
		code           int
	}{
		{[]string{"call", "calc", "add", "--args", `{"a": 40, "b": 2}`}, "42\n", "", 0},
		{[]string{"call", "calc", "swap", "--args", `[{"x": 1, "y": 2}]`}, "{\"x\":2,\"y\":1}\n", "", 0},
		{[]string{"call", "calc", "add", "--args", `{"a": 40}`}, "", "wovyr: bad-input (args.b): missing argument b: expected u32\n", exitBadInput},
		{[]string{"call", "calc", "add", "--args", `[1, 2]`, "--allow", "example.com:443"}, "", "wovyr: bad-input (network): plugin calc does not import wovyr:host/http, so a network policy has nothing to govern\n", exitBadInput},
		{[]string{"call", "calc", "add", "--args", `[1, 2]`, "--allow", "example.com"}, "", "wovyr: bad-input (allow): rule \"example.com\": want HOST:PORT or CIDR:PORT\n", exitBadInput},
		{[]string{"call", "calc", "crash"}, "", "wovyr: plugin call ended trap: error while executing at wasm backtrace:: wasm trap: wasm `unreachable` instruction executed\n", exitBackendFailure},
		{[]string{"call", "calc", "spin", "--args", `{"n": 0}`}, "", "wovyr: plugin call ran out of fuel: fuel exhausted after 1000000000 units\n", exitOutOfFuel},
		{[]string{"rm", "calc"}, "", "", 0},
		{[]string{"call", "calc", "add"}, "", "wovyr: not-found: no plugin \"calc\"\n", exitBadInput},
	} {
		token := "tok"
		if s.args[0] == "rm" {
			token = "ops-tok"
		}
		out, errs, code := run(token, s.args...)
		if out != s.stdout || errs != s.stderr || code != s.code {
			t.Errorf("wovyr plugin %v: stdout %q stderr %q exit %d, want %q %q %d", s.args, out, errs, code, s.stdout, s.stderr, s.code)
		}
		if s.args[0] == "call" && code == 0 && s.args[2] == "add" {
			lst, _, _ := run("tok", "list")
			if !strings.Contains(lst, "calc  internal  -             add         func(a: u32, b: u32) -> u32") {
				t.Errorf("list:\n%s", lst)
			}
		}
	}
}

// TestPluginCLIJavaScript: a JavaScript component built by `jco
// componentize` installs and answers typed calls through `wovyr plugin`
// and the daemon's HTTP API, as the C one does.
func TestPluginCLIJavaScript(t *testing.T) {
	wasm := plugintest.JS(t, plugintest.Jco(t), "jsdemo")
	run, comp, manifest := pluginDaemon(t, "jsdemo", wasm)
	if out, errs, code := run("ops-tok", "install", comp, "--manifest", manifest); code != 0 || !strings.Contains(out, `"name": "jsdemo"`) {
		t.Fatalf("install: %d %q %q", code, out, errs)
	}
	for _, s := range []struct {
		args           []string
		stdout, stderr string
		code           int
	}{
		{[]string{"call", "jsdemo", "greet", "--args", `{"name": "agent"}`}, "\"hello, agent\"\n", "", 0},
		{[]string{"call", "jsdemo", "summarize", "--args", `[[2, 4]]`}, "{\"count\":2,\"mean\":3}\n", "", 0},
		{[]string{"call", "jsdemo", "parse", "--args", `{"s": "nope"}`}, "{\"err\":\"not a u32: \\\"nope\\\"\"}\n", "", 0},
		{[]string{"call", "jsdemo", "add", "--args", `{"a": 1}`}, "", "wovyr: bad-input (args.b): missing argument b: expected u32\n", exitBadInput},
	} {
		if out, errs, code := run("tok", s.args...); out != s.stdout || errs != s.stderr || code != s.code {
			t.Errorf("wovyr plugin %v: stdout %q stderr %q exit %d, want %q %q %d", s.args, out, errs, code, s.stdout, s.stderr, s.code)
		}
	}
	want := "NAME    TRUST     CAPABILITIES  FUNCTION   SIGNATURE\n" +
		"jsdemo  internal  -             add        func(a: u32, b: u32) -> u32\n" +
		"%sboom       func() -> u32\n" +
		"%sfirst      func(xs: list<string>) -> option<string>\n" +
		"%sgreet      func(name: string) -> string\n" +
		"%shog        func(mib: u32) -> u32\n" +
		"%sparse      func(s: string) -> result<u32, string>\n" +
		"%sspin       func() -> u32\n" +
		"%ssummarize  func(xs: list<f64>) -> record { count: u32, mean: f64 }\n"
	if lst, _, _ := run("tok", "list"); lst != strings.ReplaceAll(want, "%s", strings.Repeat(" ", 32)) {
		t.Errorf("list:\n%s", lst)
	}
}

// pluginDaemon starts a daemon whose plugin host trusts a test key from
// its config, writes the component and its manifest (signed by that key)
// to files, and returns them with run, which runs `wovyr plugin ARGS`
// against the daemon with token.
func pluginDaemon(t *testing.T, name string, wasm []byte) (run func(token string, args ...string) (string, string, int), comp, manifest string) {
	t.Helper()
	key := ed25519.NewKeyFromSeed([]byte("wovyr cli plugin test key, 32 b."))
	cfg := config.Plugins{TrustKeys: map[string]string{"ops": base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey))}}
	host, err := newPluginHost(cfg, t.TempDir(), nil, nil, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	url := memDaemonWith(t, func(o *server.Options) { o.Plugins = host })
	t.Cleanup(host.Close)

	dir := t.TempDir()
	comp, manifest = filepath.Join(dir, name+".wasm"), filepath.Join(dir, name+".json")
	m := &plugin.Manifest{Name: name, Component: plugin.Digest(wasm), Trust: sandbox.Internal}
	plugin.Sign(m, "ops", key)
	mb, _ := json.Marshal(m)
	if os.WriteFile(comp, wasm, 0o644) != nil || os.WriteFile(manifest, mb, 0o644) != nil {
		t.Fatal("cannot write the component and its manifest")
	}
	run = func(token string, args ...string) (string, string, int) {
		t.Helper()
		var out, errb bytes.Buffer
		sc := &sessionCtx{g: &globals{stateDir: t.TempDir()}, group: "plugin", stdout: &out, stderr: &errb}
		if len(args) > 0 {
			args = append([]string{args[0], "--remote", url, "--token", token}, args[1:]...)
		}
		code := sc.dispatchGroup(context.Background(), args, pluginCommands, "")
		return out.String(), errb.String(), code
	}
	return run, comp, manifest
}
