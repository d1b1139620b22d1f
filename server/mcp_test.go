package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/mcp"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// bearer adds a token to every request of an MCP client.
type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// mcpHTTP connects the Go SDK's client to the daemon's /mcp as token.
func mcpHTTP(t testing.TB, h *harness, token string) *sdk.ClientSession {
	t.Helper()
	tr := &sdk.StreamableClientTransport{Endpoint: h.url + "/mcp", HTTPClient: &http.Client{Transport: bearer(token)}}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "wovyr-test", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatalf("connect /mcp: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// mcpMemory connects the Go SDK's client in memory to tools configured by
// m, whose API is the harness's daemon as token.
func mcpMemory(t testing.TB, h *harness, token string, m config.MCP) *sdk.ClientSession {
	t.Helper()
	tools, err := mcp.New(mcp.Options{MCP: m, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ct, st := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := tools.Server(h.client(token)).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "wovyr-test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool; a protocol error fails the test (wovyr's errors are
// tool results).
func call(t testing.TB, cs *sdk.ClientSession, name string, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v", name, err)
	}
	return res
}

// ran decodes a successful run's structured content.
func ran(t testing.TB, res *sdk.CallToolResult) mcp.RunOutput {
	t.Helper()
	if res.IsError {
		t.Fatalf("tool error: %s", textOf(res))
	}
	var out mcp.RunOutput
	structured(t, res, &out)
	return out
}

func structured(t testing.TB, res *sdk.CallToolResult, v any) {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
}

func textOf(res *sdk.CallToolResult) string {
	if len(res.Content) == 0 {
		return ""
	}
	if tc, ok := res.Content[0].(*sdk.TextContent); ok {
		return tc.Text
	}
	return ""
}

// toolError returns a tool error's typed part and its text, failing the
// test when res is not an error.
func toolError(t testing.TB, res *sdk.CallToolResult) (mcp.ErrorInfo, string) {
	t.Helper()
	if !res.IsError {
		t.Fatalf("want a tool error, got %s", textOf(res))
	}
	var info mcp.ErrorInfo
	b, _ := json.Marshal(res.Meta[mcp.ErrorMeta])
	if err := json.Unmarshal(b, &info); err != nil || info.Class == "" {
		t.Fatalf("error _meta %s: %v", b, err)
	}
	return info, textOf(res)
}

// invocations counts tenant's records.
func invocations(t testing.TB, st *store.Store, tenant string) int {
	n := 0
	if err := st.Each(func(inv store.Invocation) error {
		if inv.Tenant == tenant {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

func mcpConfig(trust sandbox.TrustClass, maxOutput int64) config.Config {
	cfg := testConfig()
	cfg.MCP = config.MCP{Trust: trust, MaxOutput: maxOutput}
	return cfg
}

// TestMCPToolsOverHTTP drives /mcp with the Go SDK's client: the tools and
// their schemas, each language of run_code and run_command on the native
// backend, exact outputs, the output cap, a timeout, and bad input that
// runs nothing.
func TestMCPToolsOverHTTP(t *testing.T) {
	h := newHarness(t, mcpConfig(sandbox.Trusted, 1024), "")
	cs := mcpHTTP(t, h, aliceToken)
	ctx := context.Background()

	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range lt.Tools {
		names = append(names, tl.Name)
		if tl.Description == "" || tl.InputSchema == nil || tl.OutputSchema == nil {
			t.Errorf("tool %s lacks a description or a schema", tl.Name)
		}
	}
	slices.Sort(names)
	want := []string{"create_session", "destroy_session", "exec", "list_backends", "list_files", "read_file", "run_code", "run_command", "write_file"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}

	for _, c := range []struct{ lang, code, out string }{
		{"python", "import sys\nprint(sum(range(10)), sys.stdin.read())", "45 in\n"},
		{"javascript", "let s = require('fs').readFileSync(0, 'utf8'); console.log(6 * 7, s)", "42 in\n"},
		{"bash", "read x; echo \"$((6 * 7)) $x\"", "42 in\n"},
	} {
		out := ran(t, call(t, cs, "run_code", map[string]any{"language": c.lang, "code": c.code, "stdin": "in"}))
		if out.Stdout != c.out || out.ExitCode != 0 || out.Backend != "native" || out.Stderr != "" {
			t.Errorf("run_code %s: %+v, want stdout %q", c.lang, out, c.out)
		}
	}
	out := ran(t, call(t, cs, "run_command", map[string]any{"argv": []string{"sh", "-c", "cat in.txt; echo err >&2; exit 3"},
		"files": []map[string]any{{"path": "in.txt", "content": "aGVsbG8K", "encoding": "base64"}}}))
	if out.Stdout != "hello\n" || out.Stderr != "err\n" || out.ExitCode != 3 {
		t.Errorf("run_command: %+v", out)
	}
	// The cap is the configured 1 KiB, and the result says it cut.
	out = ran(t, call(t, cs, "run_command", map[string]any{"argv": []string{"head", "-c", "5000", "/dev/zero"}}))
	if len(out.Stdout) != 1024 || !out.StdoutTruncated || out.StderrTruncated {
		t.Errorf("capped run: %d bytes, truncated %v", len(out.Stdout), out.StdoutTruncated)
	}
	// A timeout is a tool error of class timeout, with the output so far.
	res := call(t, cs, "run_command", map[string]any{"argv": []string{"sh", "-c", "echo started; exec sleep 10"}, "timeout": 0.5})
	info, text := toolError(t, res)
	if info.Class != sandbox.Timeout || !strings.HasPrefix(text, "timeout") {
		t.Errorf("timeout: %+v %q", info, text)
	}
	structured(t, res, &out)
	if out.Stdout != "started\n" || out.Class != "timeout" {
		t.Errorf("timeout output: %+v", out)
	}

	// Bad input: a typed tool error, and nothing recorded or run.
	before := invocations(t, h.store, "alice")
	for _, c := range []struct {
		tool  string
		args  map[string]any
		class sandbox.Class
		text  string
	}{
		{"run_code", map[string]any{"language": "cobol", "code": "DISPLAY 1"}, sandbox.BadInput, "bad-input: invalid arguments: "},
		{"run_command", map[string]any{"argv": []string{}}, sandbox.BadInput, "bad-input: invalid arguments: "},
		{"run_command", map[string]any{"argv": []string{""}}, sandbox.BadInput, "bad-input (argv): argv needs a program"},
		{"run_command", map[string]any{"argv": []string{"true"}, "shell": true}, sandbox.BadInput, "bad-input: invalid arguments: "},
		{"run_command", map[string]any{"argv": []string{"true"}, "files": []map[string]any{{"path": "../x", "content": ""}}}, sandbox.BadInput, `bad-input (workload.files): file "../x": bad-input (path): path leaves the workspace`},
		{"run_command", map[string]any{"argv": []string{"true"}, "timeout": 601}, sandbox.BadInput, "bad-input: invalid arguments: "},
	} {
		info, text := toolError(t, call(t, cs, c.tool, c.args))
		if info.Class != c.class || !strings.HasPrefix(text, c.text) {
			t.Errorf("%s %v: %+v %q, want %s %q…", c.tool, c.args, info, text, c.class, c.text)
		}
	}
	if n := invocations(t, h.store, "alice"); n != before {
		t.Errorf("bad input recorded %d invocations", n-before)
	}

	var bs mcp.BackendsOutput
	res = call(t, cs, "list_backends", nil)
	structured(t, res, &bs)
	if bs.Trust != "trusted" || bs.Required != "native" || bs.Selected != "native" || len(bs.Backends) != 2 ||
		bs.Backends[0].Name != "native" || !bs.Backends[0].Certified || !bs.Backends[0].Usable ||
		!slices.Contains(bs.Backends[0].Refuses, "trust classes [internal untrusted hostile]: it is weaker than their floor") ||
		bs.Backends[1].Name != "wasm" || bs.Backends[1].Usable {
		t.Errorf("list_backends: %s", textOf(res))
	}
}

// TestMCPFloorHolds: at the default trust class (untrusted, floor gVisor)
// a node with only native and wasm runs nothing; the tool error is
// floor-unmet and says so, over the in-memory transport through the API
// client.
func TestMCPFloorHolds(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	cs := mcpMemory(t, h, aliceToken, config.MCP{})
	for _, args := range []map[string]any{{"argv": []string{"/bin/true"}}} {
		info, text := toolError(t, call(t, cs, "run_command", args))
		if info.Class != sandbox.FloorUnmet || !strings.HasPrefix(text, "floor-unmet: no usable backend at or above gvisor") {
			t.Fatalf("run_command at untrusted: %+v %q", info, text)
		}
	}
	info, _ := toolError(t, call(t, cs, "run_code", map[string]any{"language": "python", "code": "print(1)"}))
	if info.Class != sandbox.FloorUnmet {
		t.Fatalf("run_code at untrusted: %+v", info)
	}
	var bs mcp.BackendsOutput
	structured(t, call(t, cs, "list_backends", map[string]any{}), &bs)
	if bs.Trust != "untrusted" || bs.Required != "gvisor" || bs.Selected != "" {
		t.Fatalf("list_backends: %+v", bs)
	}
	if n := invocations(t, h.store, "alice"); n != 0 {
		t.Fatalf("%d invocations recorded", n)
	}
}

// TestMCPAuth: /mcp without a token, or with an unknown one, is the API's
// 401 before any MCP handling; a session opened by one tenant cannot be
// used with another's token (403), and the other tenant's call runs
// nothing.
func TestMCPAuth(t *testing.T) {
	h := newHarness(t, mcpConfig(sandbox.Trusted, 0), "")
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	post := func(token, session, body string) (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodPost, h.url+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	for _, tok := range []string{"", "not-a-token"} {
		resp, body := post(tok, "", initialize)
		var eb client.ErrorBody
		if resp.StatusCode != 401 || json.Unmarshal([]byte(body), &eb) != nil || eb.Code != "unauthenticated" ||
			resp.Header.Get("WWW-Authenticate") != `Bearer realm="wovyr"` {
			t.Errorf("token %q: %d %s", tok, resp.StatusCode, body)
		}
	}
	resp, body := post(aliceToken, "", initialize)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || sid == "" || !strings.Contains(body, `"serverInfo":{"name":"wovyr"`) {
		t.Fatalf("alice initialize: %d %q %s", resp.StatusCode, sid, body)
	}
	post(aliceToken, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	run := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_command","arguments":{"argv":["/bin/echo","x"]}}}`
	resp, body = post(bobToken, sid, run)
	if resp.StatusCode != 403 || !strings.Contains(body, "session user mismatch") {
		t.Fatalf("bob on alice's session: %d %s", resp.StatusCode, body)
	}
	if a, b := invocations(t, h.store, "alice"), invocations(t, h.store, "bob"); a != 0 || b != 0 {
		t.Fatalf("hijack attempt recorded %d and %d invocations", a, b)
	}
	resp, body = post(aliceToken, sid, run)
	if resp.StatusCode != 200 || !strings.Contains(body, `\"stdout\":\"x\\n\"`) {
		t.Fatalf("alice on her session: %d %s", resp.StatusCode, body)
	}
	if a := invocations(t, h.store, "alice"); a != 1 {
		t.Fatalf("alice has %d invocations, want 1", a)
	}
}

// TestMCPSessionsAreTheTenants: the session tools over /mcp on the
// container backend: create, write, exec (argv and command), list, read
// and destroy; another tenant's every session tool on that id is the
// same not-found as for a missing id. run_code of a language whose image
// the node lacks names the image.
func TestMCPSessionsAreTheTenants(t *testing.T) {
	var img string
	h := newHarnessWith(t, mcpConfig(sandbox.Internal, 1024), "", containerSessions(t, &img))
	alice, bob := mcpHTTP(t, h, aliceToken), mcpHTTP(t, h, bobToken)

	res := call(t, alice, "create_session", map[string]any{"image": "busybox", "idle_timeout": 60, "timeout": 20})
	var s mcp.SessionOutput
	if structured(t, res, &s); res.IsError || s.State != "running" || s.Backend != "container" || len(s.SessionID) != 32 || s.IdleTimeout != 60 {
		t.Fatalf("create_session: %s", textOf(res))
	}
	id := s.SessionID
	var wf mcp.WriteFileOutput
	structured(t, call(t, alice, "write_file", map[string]any{"session_id": id, "path": "src/hello.sh", "content": "echo hello $1\n"}), &wf)
	if wf.Bytes != 14 {
		t.Fatalf("write_file: %+v", wf)
	}
	out := ran(t, call(t, alice, "exec", map[string]any{"session_id": id, "argv": []string{"sh", "src/hello.sh", "agent"}}))
	if out.Stdout != "hello agent\n" || out.ExitCode != 0 || out.Backend != "container" {
		t.Fatalf("exec argv: %+v", out)
	}
	out = ran(t, call(t, alice, "exec", map[string]any{"session_id": id, "command": "sh src/hello.sh again > out.txt; printf '\\377' > bin"}))
	if out.ExitCode != 0 {
		t.Fatalf("exec command: %+v", out)
	}
	var rf mcp.ReadFileOutput
	structured(t, call(t, alice, "read_file", map[string]any{"session_id": id, "path": "out.txt"}), &rf)
	if rf.Content != "hello again\n" || rf.Encoding != "utf-8" || rf.Size != 12 || rf.Truncated {
		t.Fatalf("read_file: %+v", rf)
	}
	structured(t, call(t, alice, "read_file", map[string]any{"session_id": id, "path": "bin"}), &rf)
	if rf.Content != "/w==" || rf.Encoding != "base64" {
		t.Fatalf("read_file of a binary: %+v", rf)
	}
	// Over the 1 KiB cap: cut, said so, and a rune split by the cut is
	// still text ("é\n" is 3 bytes: byte 1023 starts the 342nd é).
	ran(t, call(t, alice, "exec", map[string]any{"session_id": id, "command": "yes é | head -c 2000 > big"}))
	structured(t, call(t, alice, "read_file", map[string]any{"session_id": id, "path": "big"}), &rf)
	if !rf.Truncated || rf.Size != 2000 || rf.Encoding != "utf-8" || !strings.HasPrefix(rf.Content, "é\né\n") || len(rf.Content) != 1023 {
		t.Fatalf("read_file over the cap: %+v", rf)
	}
	ran(t, call(t, alice, "exec", map[string]any{"session_id": id, "argv": []string{"rm", "big"}}))
	var lf mcp.ListFilesOutput
	structured(t, call(t, alice, "list_files", map[string]any{"session_id": id}), &lf)
	var paths []string
	for _, e := range lf.Entries {
		paths = append(paths, e.Path+":"+e.Type)
	}
	if !slices.Equal(paths, []string{"bin:file", "out.txt:file", "src:dir"}) {
		t.Fatalf("list_files: %v", paths)
	}

	// Bob: alice's id is not-found on every tool, as a made-up one is.
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"exec", map[string]any{"session_id": id, "argv": []string{"cat", "out.txt"}}},
		{"read_file", map[string]any{"session_id": id, "path": "out.txt"}},
		{"write_file", map[string]any{"session_id": id, "path": "x", "content": "bob"}},
		{"list_files", map[string]any{"session_id": id}},
		{"destroy_session", map[string]any{"session_id": id}},
	} {
		info, text := toolError(t, call(t, bob, c.tool, c.args))
		const other = "0123456789abcdef0123456789abcdef"
		c.args["session_id"] = other
		missing, _ := toolError(t, call(t, bob, c.tool, c.args))
		missing.Message = strings.ReplaceAll(missing.Message, other, id)
		if info.Class != sandbox.NotFound || info != missing || info.Message != "not-found (id): no session "+id {
			t.Errorf("bob %s on alice's session: %+v %q; on a missing one: %+v", c.tool, info, text, missing)
		}
	}
	structured(t, call(t, alice, "read_file", map[string]any{"session_id": id, "path": "out.txt"}), &rf)
	if rf.Content != "hello again\n" {
		t.Fatalf("after bob: %+v", rf)
	}
	info, _ := toolError(t, call(t, alice, "exec", map[string]any{"session_id": id, "argv": []string{"true"}, "command": "true"}))
	if info.Class != sandbox.BadInput || info.Field != "command" {
		t.Fatalf("exec with argv and command: %+v", info)
	}

	res = call(t, alice, "destroy_session", map[string]any{"session_id": id})
	if structured(t, res, &s); res.IsError || s.State != "ended" {
		t.Fatalf("destroy_session: %s", textOf(res))
	}
	info, _ = toolError(t, call(t, alice, "exec", map[string]any{"session_id": id, "argv": []string{"true"}}))
	if info.Class != sandbox.Conflict {
		t.Fatalf("exec after destroy: %+v", info)
	}

	// run_code at internal runs on container, in the image configured
	// for python ("python"): this cache has busybox only unless the
	// python template was built.
	if img == "busybox" {
		info, text := toolError(t, call(t, alice, "run_code", map[string]any{"language": "python", "code": "print(1)"}))
		if info.Class != sandbox.BadInput || info.Field != "language" ||
			!strings.HasPrefix(text, `bad-input (language): language python runs in the image "python" (mcp.images.python), which this node cannot use: bad-input (workload.image): no template "python" on this node`) {
			t.Fatalf("run_code without its image: %+v %q", info, text)
		}
	}
}
