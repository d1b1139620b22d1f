package mcp

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/manager"
	"github.com/wovyr/wovyr/sandbox"
)

// API is what the tools call: wovyr's HTTP API, as *client.Client speaks
// it. Its errors carry their sandbox.Class (client.Error unwraps to it).
type API interface {
	Run(ctx context.Context, inv *sandbox.Invocation) (*sandbox.Result, error)
	Backends(ctx context.Context) ([]manager.Status, error)
	CreateSession(ctx context.Context, req *client.SessionRequest) (*client.Session, error)
	Exec(ctx context.Context, id string, e *sandbox.Exec) (*sandbox.Result, error)
	Upload(ctx context.Context, id, path string, data []byte, mode uint32) error
	Download(ctx context.Context, id, path string) ([]byte, error)
	ListFiles(ctx context.Context, id, dir string) ([]sandbox.FileInfo, error)
	DeleteSession(ctx context.Context, id string) (*client.Session, error)
}

var _ API = (*client.Client)(nil)

// Options configure the tools.
type Options struct {
	// MCP is the operator's configuration: trust class, images per
	// language, output cap. Its zero fields take config's defaults.
	MCP config.MCP
	// Version is reported to clients as the server's version. Zero means
	// "dev".
	Version string
	// Logger receives the SDK's and the tools' logs. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// Tools is the set of wovyr's MCP tools, built once; Server binds it to
// one caller's API. It is safe for concurrent use.
type Tools struct {
	cfg     config.MCP
	version string
	log     *slog.Logger
	tools   []*tool
}

// New builds the tools (their schemas are derived and resolved here, once).
func New(opts Options) (*Tools, error) {
	full, err := config.Config{MCP: opts.MCP}.WithDefaults()
	if err != nil {
		return nil, fmt.Errorf("mcp: %w", err)
	}
	t := &Tools{cfg: full.MCP, version: opts.Version, log: opts.Logger}
	if t.version == "" {
		t.version = "dev"
	}
	if t.log == nil {
		t.log = slog.Default()
	}
	for lang := range t.cfg.Images {
		if _, ok := interpreters[lang]; !ok {
			return nil, fmt.Errorf("mcp: language %q has no interpreter here", lang)
		}
	}
	defs := []func() (*tool, error){t.runCodeTool, t.runCommandTool, t.listBackendsTool,
		t.createSessionTool, t.execTool, t.writeFileTool, t.readFileTool, t.listFilesTool, t.destroySessionTool}
	for _, def := range defs {
		tl, err := def()
		if err != nil {
			return nil, fmt.Errorf("mcp: %w", err)
		}
		t.tools = append(t.tools, tl)
	}
	return t, nil
}

// Config is the configuration in effect, defaults filled in.
func (t *Tools) Config() config.MCP { return t.cfg }

// instructions is what an MCP client may hand its model about the server.
const instructions = `wovyr runs code and commands in sandboxes. Use run_code for a snippet (python, javascript, bash) and run_command for a program with arguments; each call starts from a clean sandbox. For work that keeps state between steps (files, installed tools), create_session, then exec, write_file, read_file and list_files in it, and destroy_session when done. The sandbox has no network unless the operator allowed it. Errors say their class first (bad-input, floor-unmet, timeout, ...): bad-input means fix the arguments; floor-unmet means this node has no sandbox strong enough, retrying will not help.`

// Server returns an MCP server whose tools call api.
func (t *Tools) Server(api API) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "wovyr", Title: "wovyr sandboxed tool runtime", Version: t.version},
		&sdk.ServerOptions{Instructions: instructions, Logger: t.log})
	for _, tl := range t.tools {
		call := tl.call
		s.AddTool(tl.def, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return call(ctx, api, t.log, req.Params.Arguments), nil
		})
	}
	return s
}

// sessionIdle ends an HTTP MCP session no request touched for this long.
const sessionIdle = 30 * time.Minute

// Handler serves the tools over streamable HTTP. bind is called once per
// MCP session, with its first request, which the caller has already
// authenticated: it returns the API of that request's caller and the
// tenant it acts for. Every later request of the session must come from
// the same tenant, or the SDK answers 403 (session user mismatch) and the
// session's API is never used for it. maxBody bounds a request (zero: the
// SDK's 4 MiB).
func (t *Tools) Handler(bind func(*http.Request) (API, string), maxBody int64) http.Handler {
	h := sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
		api, _ := bind(r)
		if api == nil {
			return nil // the SDK answers 400; the caller's auth let it through unauthenticated
		}
		return t.Server(api)
	}, &sdk.StreamableHTTPOptions{Logger: t.log, SessionTimeout: sessionIdle, MaxRequestBodyBytes: maxBody})
	// The SDK binds a session to TokenInfo.UserID; RequireBearerToken is
	// the only way to set it. Its verifier here does not authenticate (the
	// caller did): it names the tenant the request was authenticated as.
	verify := func(_ context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		_, tenant := bind(r)
		if tenant == "" {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: tenant}, nil
	}
	return auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
}
