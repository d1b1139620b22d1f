package config

import (
	"maps"
	"slices"

	"github.com/wovyr/wovyr/sandbox"
)

// MCPLanguages are the languages the MCP tool run_code knows (package mcp
// holds how each one's code is started).
var MCPLanguages = []string{"python", "javascript", "bash"}

// MCPDefaultImages are run_code's templates per language where the
// configuration names none: the recipes of `wovyr image build python`
// (python3, and bash) and `wovyr image build node` (Node.js).
var MCPDefaultImages = map[string]string{"python": "python", "javascript": "node", "bash": "python"}

// MCP configures the Model Context Protocol tools (package mcp), served by
// the daemon under /mcp and by `wovyr mcp` over stdio.
type MCP struct {
	// Trust is the trust class of every MCP tool call. Code an MCP client
	// sends is written by a model, so zero means untrusted (floor gvisor,
	// DESIGN §1). A tool's arguments cannot change it (ADR 0030).
	Trust sandbox.TrustClass `json:"trust,omitzero"`
	// Images maps each of run_code's languages to the template its code
	// runs in on container and stronger backends (native runs the host's
	// interpreter). A language left out keeps its default (MCPDefaultImages:
	// "python" for python and bash, "node" for javascript); an image
	// without the language's interpreter is a typed run_code error naming
	// both.
	Images map[string]string `json:"images,omitempty"`
	// MaxOutput caps what one tool result carries of stdout, of stderr and
	// of a file read; the result says when it cut. Zero means 64 KiB, a
	// size a model's context takes without drowning.
	MaxOutput int64 `json:"max_output,omitempty"`
}

// withDefaults fills m's zero fields and validates it.
func (m MCP) withDefaults() (MCP, error) {
	if m.Trust == 0 {
		m.Trust = sandbox.Untrusted
	}
	if m.MaxOutput == 0 {
		m.MaxOutput = 64 << 10
	}
	imgs := maps.Clone(m.Images)
	if imgs == nil {
		imgs = map[string]string{}
	}
	for lang, img := range imgs {
		if !slices.Contains(MCPLanguages, lang) {
			return m, sandbox.Errorf(sandbox.BadInput, "mcp.images", "unknown language %q (want one of %v)", lang, MCPLanguages)
		}
		if img == "" {
			return m, sandbox.Errorf(sandbox.BadInput, "mcp.images", "language %s names no image", lang)
		}
	}
	for _, lang := range MCPLanguages {
		if imgs[lang] == "" {
			imgs[lang] = MCPDefaultImages[lang]
		}
	}
	m.Images = imgs
	switch {
	case !m.Trust.Valid():
		return m, sandbox.Errorf(sandbox.BadInput, "mcp.trust", "invalid trust class %d", int(m.Trust))
	case m.MaxOutput < 1024 || m.MaxOutput > sandbox.MaxOutputBytes:
		return m, sandbox.Errorf(sandbox.BadInput, "mcp.max_output", "want 1024 to %d bytes, not %d", sandbox.MaxOutputBytes, m.MaxOutput)
	}
	return m, nil
}
