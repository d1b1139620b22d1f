package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
)

// tool is one tool's definition and its call, bound to an API per server.
type tool struct {
	def  *sdk.Tool
	call func(ctx context.Context, api API, log *slog.Logger, args json.RawMessage) *sdk.CallToolResult
}

// spec is what define needs besides the handler.
type spec struct {
	name, title, description string
	readOnly, destructive    bool
	// schema adjusts the input schema derived from In (enums, bounds).
	schema func(props map[string]*jsonschema.Schema)
}

// define makes a tool of fn. Its input schema is derived from In's fields
// (their jsonschema tags are the descriptions), and arguments are checked
// here, not by the SDK's typed handler, so that a bad argument is a
// bad-input tool error like every other wovyr error: validated against the
// schema, then decoded strictly (an unknown field is refused). Out is the
// output schema and the result's structured content.
//
// # Why not sdk.AddTool[In, Out]
//
// Its validation failures come back as plain text without a class, and its
// handler's errors lose theirs.
func define[In, Out any](sp spec, fn func(ctx context.Context, api API, in *In) (*Out, error)) (*tool, error) {
	in, err := jsonschema.For[In](nil)
	if err != nil {
		return nil, fmt.Errorf("tool %s: input schema: %w", sp.name, err)
	}
	if sp.schema != nil {
		sp.schema(in.Properties)
	}
	resolved, err := in.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("tool %s: input schema: %w", sp.name, err)
	}
	out, err := jsonschema.For[Out](nil)
	if err != nil {
		return nil, fmt.Errorf("tool %s: output schema: %w", sp.name, err)
	}
	f := false
	def := &sdk.Tool{Name: sp.name, Title: sp.title, Description: sp.description, InputSchema: in, OutputSchema: out,
		Annotations: &sdk.ToolAnnotations{Title: sp.title, ReadOnlyHint: sp.readOnly, DestructiveHint: &sp.destructive, OpenWorldHint: &f}}
	call := func(ctx context.Context, api API, log *slog.Logger, args json.RawMessage) *sdk.CallToolResult {
		v, err := decodeArgs[In](resolved, args)
		if err != nil {
			return errorResult(err)
		}
		o, err := fn(ctx, api, v)
		if err != nil {
			if c := sandbox.ClassOf(err); c == sandbox.BackendFailure || c == sandbox.Lost {
				// The model reads the tenant's rendering; whoever runs
				// this server reads the whole error.
				log.Warn("mcp tool failed", "tool", sp.name, "class", c, "error", err.Error())
			}
			return errorResult(err)
		}
		return okResult(o)
	}
	return &tool{def: def, call: call}, nil
}

// decodeArgs validates args against the schema and decodes them into an In.
func decodeArgs[In any](resolved *jsonschema.Resolved, args json.RawMessage) (*In, error) {
	if len(bytes.TrimSpace(args)) == 0 || string(bytes.TrimSpace(args)) == "null" {
		args = json.RawMessage("{}")
	}
	var m map[string]any
	if err := json.Unmarshal(args, &m); err != nil {
		return nil, sandbox.Errorf(sandbox.BadInput, "", "the arguments must be a JSON object: %v", err)
	}
	if err := resolved.Validate(m); err != nil {
		return nil, sandbox.Errorf(sandbox.BadInput, "", "invalid arguments: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	v := new(In)
	if err := dec.Decode(v); err != nil {
		return nil, sandbox.Errorf(sandbox.BadInput, "", "invalid arguments: %v", err)
	}
	if dec.Decode(&struct{}{}) != io.EOF {
		return nil, sandbox.Errorf(sandbox.BadInput, "", "the arguments must be one JSON object")
	}
	return v, nil
}

// okResult is o as structured content and as its JSON text, the form the
// MCP spec asks of tools with an output schema.
func okResult(o any) *sdk.CallToolResult {
	b, err := json.Marshal(o)
	if err != nil {
		return errorResult(sandbox.Wrap(sandbox.BackendFailure, err, "encode the result"))
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(b)}}, StructuredContent: json.RawMessage(b)}
}

// ErrorMeta is the key of a tool error's _meta entry: an ErrorInfo.
const ErrorMeta = "wovyr/error"

// ErrorInfo is a tool error's typed part, in _meta[ErrorMeta].
type ErrorInfo struct {
	Class   sandbox.Class `json:"class"`
	Message string        `json:"message"`
	Field   string        `json:"field,omitempty"`
}

// errorResult is err as a tool error: IsError, the text "CLASS: message"
// and the ErrorInfo in _meta. The message is the tenant's rendering
// (sandbox.Public), as the API's error bodies are.
//
// A workload that ran and was ended (timeout, oom, …) is an error result
// too, with its output as the structured content: what it printed before
// it was ended is often why.
func errorResult(err error) *sdk.CallToolResult {
	info := errorInfo(err)
	text := info.Message
	if !strings.HasPrefix(text, string(info.Class)) {
		text = string(info.Class) + ": " + text
	}
	r := &sdk.CallToolResult{}
	var ended *endedError
	if errors.As(err, &ended) {
		r = okResult(ended.out)
	}
	r.IsError, r.Meta = true, sdk.Meta{ErrorMeta: info}
	r.Content = append([]sdk.Content{&sdk.TextContent{Text: text}}, r.Content...)
	return r
}

func errorInfo(err error) ErrorInfo {
	info := ErrorInfo{Class: sandbox.ClassOf(err), Message: sandbox.Public(err), Field: sandbox.FieldOf(err)}
	var ce *client.Error
	if errors.As(err, &ce) {
		// The daemon rendered it for the tenant already.
		info.Message, info.Field = ce.Message, ce.Field
	}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		if info.Class == sandbox.OK || info.Class == sandbox.BackendFailure {
			info.Class, info.Message = sandbox.Killed, "killed: the tool call was cancelled or ran out of time"
		}
	case info.Class == sandbox.OK:
		info.Class = sandbox.BackendFailure
	}
	info.Message = strings.TrimSpace(info.Message)
	return info
}
