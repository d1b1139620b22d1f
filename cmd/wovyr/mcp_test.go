package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wovyr/wovyr/mcp"
)

// mcpDaemon is a `wovyr serve` on a copy of the certified state (native
// only) whose /mcp runs at trust conf's, and its bootstrap token.
func mcpDaemon(t *testing.T, conf string) (*daemon, string) {
	t.Helper()
	state, err := os.MkdirTemp("", "wovyr-mcp-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(state, 0o711)
	t.Cleanup(func() { os.RemoveAll(state) })
	if err := copyFile(certifiedDB, filepath.Join(state, "wovyr.db")); err != nil {
		t.Fatal(err)
	}
	d := startDaemonConfig(t, wovyrBin, state, conf)
	tok, err := os.ReadFile(filepath.Join(state, tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	return d, strings.TrimSpace(string(tok))
}

// readmeMCPConfig is the mcpServers entry of the README's MCP section.
type readmeMCPConfig struct {
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
}

func readmeMCP(t *testing.T) readmeMCPConfig {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "### Agents: MCP")
	m := regexp.MustCompile("(?s)```json\n(.*?)```").FindStringSubmatch(sec)
	if !ok || m == nil {
		t.Fatal("README.md has no MCP section with a json block")
	}
	var doc struct {
		MCPServers map[string]readmeMCPConfig `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(m[1]), &doc); err != nil {
		t.Fatalf("README's MCP config: %v", err)
	}
	c, ok := doc.MCPServers["wovyr"]
	if !ok || c.Command != "wovyr" {
		t.Fatalf("README's MCP config: %+v", doc)
	}
	return c
}

// stdioSession starts c (the README's form) as a client would, with the
// built binary for "wovyr", remote for the README's daemon URL and token
// for its placeholder, and connects the Go SDK's client to it.
func stdioSession(t *testing.T, c readmeMCPConfig, remote, token string, extra ...string) *sdk.ClientSession {
	t.Helper()
	var args []string
	for _, a := range c.Args {
		args = append(args, strings.Replace(a, "http://127.0.0.1:8080", remote, 1))
	}
	cmd := exec.Command(wovyrBin, append(args, extra...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range c.Env {
		if v == "YOUR-TOKEN" {
			v = token
		}
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "wovyr-test", Version: "1"}, nil).Connect(context.Background(), &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect %v: %v", cmd.Args, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callTool(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) (*sdk.CallToolResult, map[string]any) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v", name, err)
	}
	out, _ := res.StructuredContent.(map[string]any)
	return res, out
}

func errClass(res *sdk.CallToolResult) string {
	info, _ := res.Meta[mcp.ErrorMeta].(map[string]any)
	c, _ := info["class"].(string)
	return c
}

// TestReadmeMCPConfig runs the README's Claude-Desktop-style stdio
// configuration as is against a daemon: at its trust class (untrusted) a
// native-only node refuses with floor-unmet; with the README's
// `--trust trusted` the same configuration runs python and a command.
func TestReadmeMCPConfig(t *testing.T) {
	d, tok := mcpDaemon(t, `{"cgroup_reconcile": "owned", "tenants": []}`)
	c := readmeMCP(t)

	cs := stdioSession(t, c, d.url, tok)
	res, _ := callTool(t, cs, "run_command", map[string]any{"argv": []string{"/bin/echo", "hi"}})
	if !res.IsError || errClass(res) != "floor-unmet" {
		t.Fatalf("untrusted run on a native-only node: %+v", res)
	}
	_, bs := callTool(t, cs, "list_backends", nil)
	if bs["trust"] != "untrusted" || bs["required"] != "gvisor" {
		t.Fatalf("list_backends: %v", bs)
	}

	cs = stdioSession(t, c, d.url, tok, "--trust", "trusted")
	res, out := callTool(t, cs, "run_code", map[string]any{"language": "python", "code": "import sys; print('py', sys.version_info[0])"})
	if res.IsError || out["stdout"] != "py 3\n" || out["backend"] != "native" {
		t.Fatalf("run_code: %+v", res)
	}
	res, out = callTool(t, cs, "run_command", map[string]any{"argv": []string{"/bin/echo", "hi"}})
	if res.IsError || out["stdout"] != "hi\n" || out["exit_code"] != 0.0 {
		t.Fatalf("run_command: %+v", res)
	}
	// A wrong token is the daemon's 401, a tool error of its class.
	cs = stdioSession(t, c, d.url, "wrong", "--trust", "trusted")
	if res, _ = callTool(t, cs, "run_command", map[string]any{"argv": []string{"/bin/true"}}); errClass(res) != "unauthenticated" {
		t.Fatalf("wrong token: %+v", res)
	}
}

// TestMCPTypeScriptClient drives both transports with the npm
// @modelcontextprotocol/sdk client (scripts/npm-deps installs it): stdio
// through `wovyr mcp`, and HTTP to the daemon's /mcp. It skips, saying
// why, only where npm cannot install the package.
func TestMCPTypeScriptClient(t *testing.T) {
	out, err := exec.Command("../../scripts/npm-deps").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Skipf("the npm MCP SDK is not installable here (npm unreachable?): %v %s", err, stderr)
	}
	npm := strings.TrimSpace(string(out))
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(npm, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "mcp_client.mjs")
	if err := copyFile("testdata/mcp_client.mjs", script); err != nil {
		t.Fatal(err)
	}
	d, tok := mcpDaemon(t, `{"cgroup_reconcile": "owned", "tenants": [], "mcp": {"trust": "trusted"}}`)
	want := `{"server":"wovyr","tools":["create_session","destroy_session","exec","list_backends","list_files","read_file","run_code","run_command","write_file"],` +
		`"code":[false,"42\n","native"],"cmd":[false,"ts\n",0],"bad":[true,"bad-input"],"lang":[true,"bad-input"]}`
	for _, args := range [][]string{{"stdio", wovyrBin, d.url, tok}, {"http", d.url, tok}} {
		cmd := exec.Command("node", append([]string{script}, args...)...)
		got, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(got)) != want {
			t.Errorf("%s: %v\n got %s\nwant %s", args[0], err, got, want)
		}
	}
}

// TestMCPInspectorCLI drives wovyr's MCP tools with the MCP Inspector's
// CLI (npm @modelcontextprotocol/inspector, `--cli`; it replaced the
// deprecated @modelcontextprotocol/inspector-cli), a client nobody in
// this project wrote: over stdio it lists the tools of `wovyr mcp` as the
// README configures it (with its `--trust trusted`) and runs a command; over HTTP to the daemon's /mcp
// it runs code, and a bad argument comes back as a typed tool error. It
// skips, saying why, only where npm cannot install the package.
func TestMCPInspectorCLI(t *testing.T) {
	out, err := exec.Command("../../scripts/npm-deps").Output()
	if err != nil {
		t.Skipf("the npm MCP Inspector is not installable here (npm unreachable?): %v", err)
	}
	inspector := filepath.Join(strings.TrimSpace(string(out)), "node_modules", ".bin", "mcp-inspector")
	d, tok := mcpDaemon(t, `{"cgroup_reconcile": "owned", "tenants": [], "mcp": {"trust": "trusted"}}`)
	var stdio []string
	for _, a := range readmeMCP(t).Args {
		stdio = append(stdio, strings.Replace(a, "http://127.0.0.1:8080", d.url, 1))
	}
	// The README's `--trust trusted`, for this native-only node.
	stdio = append(append([]string{"--cli", "-e", "WOVYR_TOKEN=" + tok, wovyrBin}, stdio...), "--trust", "trusted")
	http := []string{"--cli", d.url + "/mcp", "--transport", "http", "--header", "Authorization: Bearer " + tok}
	// inspect runs the inspector; a tool error is its exit status 5.
	var exitCode int
	inspect := func(target []string, args ...string) map[string]any {
		t.Helper()
		cmd := exec.Command(inspector, append(target, args...)...)
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir()) // its catalog stays in the test's home
		b, err := cmd.Output()
		exitCode = cmd.ProcessState.ExitCode()
		var v map[string]any
		if jerr := json.NewDecoder(strings.NewReader(string(b))).Decode(&v); (err != nil && exitCode != 5) || jerr != nil {
			t.Fatalf("inspector %q: %v %v\n%s", args, err, jerr, b)
		}
		return v
	}

	var names []string
	for _, tool := range inspect(stdio, "--method", "tools/list")["tools"].([]any) {
		names = append(names, tool.(map[string]any)["name"].(string))
	}
	if got := strings.Join(names, " "); got != "create_session destroy_session exec list_backends list_files read_file run_code run_command write_file" {
		t.Errorf("tools over stdio: %s", got)
	}
	res := inspect(stdio, "--method", "tools/call", "--tool-name", "run_command", "--tool-arg", `argv=["/bin/echo","inspected"]`)
	if sc, _ := res["structuredContent"].(map[string]any); sc["stdout"] != "inspected\n" || sc["exit_code"] != 0.0 || res["isError"] == true || exitCode != 0 {
		t.Errorf("run_command over stdio: %v", res)
	}
	res = inspect(http, "--method", "tools/call", "--tool-name", "run_code", "--tool-arg", "language=python", "--tool-arg", "code=print(6 * 7)")
	if sc, _ := res["structuredContent"].(map[string]any); sc["stdout"] != "42\n" || sc["backend"] != "native" || exitCode != 0 {
		t.Errorf("run_code over HTTP: %v", res)
	}
	res = inspect(http, "--method", "tools/call", "--tool-name", "run_command", "--tool-arg", "argv=[]")
	if meta, _ := res["_meta"].(map[string]any); res["isError"] != true || exitCode != 5 || meta[mcp.ErrorMeta].(map[string]any)["class"] != "bad-input" {
		t.Errorf("a bad argument over HTTP: exit %d, %v", exitCode, res)
	}
}
