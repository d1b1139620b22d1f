package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/sandbox"
)

// PluginInstall is POST /v1/plugins's body: the manifest as the operator
// wrote it, and the component's bytes (base64 in JSON).
type PluginInstall struct {
	Manifest  json.RawMessage `json:"manifest"`
	Component []byte          `json:"component"`
}

// Plugin is the API's view of an installed plugin.
type Plugin struct {
	Name         string             `json:"name"`
	Component    string             `json:"component"` // sha256:HEX
	Trust        sandbox.TrustClass `json:"trust"`
	Capabilities []string           `json:"capabilities"`
	Imports      []string           `json:"imports"`
	// Isolated says its calls run out of process, each in a fresh sandbox
	// at its trust class's floor.
	Isolated  bool             `json:"isolated,omitempty"`
	Functions []PluginFunction `json:"functions"`
	// Limits are each call's fuel, memory (bytes) and wall_ms.
	Limits   map[string]int64 `json:"limits"`
	SignedBy string           `json:"signed_by,omitempty"`
	// Code is "quick" while a large component runs the quickly compiled
	// code of its first load, "optimized" once the full compile is in.
	Code string `json:"code,omitempty"`
}

// PluginFunction is an exported function and its WIT signature.
type PluginFunction struct {
	Name      string `json:"name"`
	Signature string `json:"signature"`
}

// PluginList is GET /v1/plugins's body.
type PluginList struct {
	Plugins []Plugin `json:"plugins"`
}

// PluginCall is POST /v1/plugins/{name}/call's body: the function and its
// arguments, an object by parameter name or an array in order.
type PluginCall struct {
	Function string          `json:"function"`
	Args     json.RawMessage `json:"args,omitempty"`
	// Network is the policy the plugin's wovyr:host/http requests are held
	// to; absent denies every request.
	Network netpolicy.Policy `json:"network,omitzero"`
}

// PluginResult is how a plugin call ended (a 200 whatever the end).
type PluginResult struct {
	Value    json.RawMessage `json:"value"`
	End      string          `json:"end"` // ok, trap, out-of-fuel, timeout, cancelled
	Error    string          `json:"error,omitempty"`
	FuelUsed uint64          `json:"fuel_used"`
	Took     time.Duration   `json:"took_ns"`
	Fresh    bool            `json:"fresh_instance"`
	// Invocation names the call in the node's log and egress decisions.
	Invocation  string           `json:"invocation"`
	Logs        []PluginLogEntry `json:"logs,omitempty"`
	LogsDropped int              `json:"logs_dropped,omitempty"`
}

// PluginLogEntry is one entry the plugin logged (wovyr:host/log).
type PluginLogEntry struct {
	Level   string            `json:"level"`
	Message string            `json:"message"`
	Fields  map[string]string `json:"fields,omitempty"`
}

func pluginPath(name string) string { return "/v1/plugins/" + url.PathEscape(name) }

// InstallPlugin installs (or replaces) a plugin; it needs an admin token.
func (c *Client) InstallPlugin(ctx context.Context, manifest, component []byte) (*Plugin, error) {
	body, err := json.Marshal(PluginInstall{Manifest: manifest, Component: component})
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BadInput, err, "encode plugin") // the manifest is not JSON
	}
	var out Plugin
	return &out, c.do(ctx, http.MethodPost, "/v1/plugins", body, &out)
}

// Plugins lists the installed plugins.
func (c *Client) Plugins(ctx context.Context) ([]Plugin, error) {
	var out PluginList
	return out.Plugins, c.do(ctx, http.MethodGet, "/v1/plugins", nil, &out)
}

// RemovePlugin uninstalls name (admin) and returns what it was.
func (c *Client) RemovePlugin(ctx context.Context, name string) (*Plugin, error) {
	var out Plugin
	return &out, c.do(ctx, http.MethodDelete, pluginPath(name), nil, &out)
}

// CallPlugin calls function fn of plugin name with JSON args.
func (c *Client) CallPlugin(ctx context.Context, name, fn string, args json.RawMessage) (*PluginResult, error) {
	return c.CallPluginWith(ctx, name, PluginCall{Function: fn, Args: args})
}

// CallPluginWith is CallPlugin with the whole request: a network policy
// for the plugin's outgoing HTTP as well.
func (c *Client) CallPluginWith(ctx context.Context, name string, call PluginCall) (*PluginResult, error) {
	body, err := json.Marshal(call)
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BadInput, err, "encode plugin call") // args are not JSON
	}
	var out PluginResult
	return &out, c.do(ctx, http.MethodPost, pluginPath(name)+"/call", body, &out)
}
