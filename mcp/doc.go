// Package mcp serves wovyr to agents over the Model Context Protocol, with
// the official Go SDK: one-shot tools (run_code, run_command), session
// tools (create_session, exec, write_file, read_file, list_files,
// destroy_session) and list_backends, each with a JSON schema and a
// description a model can follow.
//
// Every tool is a call of wovyr's HTTP API through API, the interface the
// Go client (package client) implements: `wovyr mcp` (stdio) holds a client
// of a daemon, and the daemon's /mcp route (package server) one of its own
// handler in-process. So a tool call takes exactly the path of an API call
// — authentication, rate guard, validation, floor, admission, egress,
// records — and there is no second implementation to drift.
//
// What it refuses to do:
//   - Let a tool's arguments choose the trust class. The class is the
//     operator's (config MCP.Trust, default untrusted: the code an MCP
//     client sends is written by a model); a model cannot ask for a weaker
//     sandbox (ADR 0030).
//   - Report a failure as a protocol error. A bad argument, an unmet floor,
//     a timeout come back as a tool result with IsError set, its text
//     "CLASS: message" and its _meta["wovyr/error"] the typed class, field
//     and message, so the model reads why and the caller can branch.
//   - Hand a model unbounded output. stdout, stderr and file contents are
//     cut at MCP.MaxOutput, and the result says so.
//   - Serve one tenant's MCP session to another: over HTTP a session is
//     bound to the tenant of the token that opened it (Handler).
package mcp
