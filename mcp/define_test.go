package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
)

// TestArgumentsAreCheckedBeforeAnything: every malformed argument object
// is a bad-input error naming what is wrong, from the schema check or the
// strict decode, and the tool's own function is never reached.
func TestArgumentsAreCheckedBeforeAnything(t *testing.T) {
	tools, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	var rc *tool
	for _, tl := range tools.tools {
		if tl.def.Name == "run_command" {
			rc = tl
		}
	}
	for _, c := range []struct{ args, want string }{
		{`[1]`, "bad-input: the arguments must be a JSON object"},
		{`{}`, `bad-input: invalid arguments: `},
		{`{"argv": "ls"}`, `bad-input: invalid arguments: `},
		{`{"argv": ["ls"], "timeout": -1}`, `bad-input: invalid arguments: `},
		{`{"argv": ["ls"], "files": [{"path": "a", "content": "x", "encoding": "hex"}]}`, `bad-input: invalid arguments: `},
		{`{"argv": ["ls"], "files": [{"path": "a", "content": "!", "encoding": "base64"}]}`, "bad-input (files[0].content): content is not base64"},
		{`{"argv": ["ls"], "trust": "trusted"}`, `bad-input: invalid arguments: `},
	} {
		// A nil API: reaching it would panic.
		res := rc.call(context.Background(), nil, tools.log, json.RawMessage(c.args))
		tc := res.Content[0].(*sdk.TextContent)
		info, _ := res.Meta[ErrorMeta].(ErrorInfo)
		if !res.IsError || info.Class != sandbox.BadInput || !strings.HasPrefix(tc.Text, c.want) || res.StructuredContent != nil {
			t.Errorf("%s: %+v %q, want %q…", c.args, info, tc.Text, c.want)
		}
	}
}

// TestErrorInfoKeepsTheDaemonsRendering: an API error keeps the daemon's
// tenant message and field; a cancellation is killed, not a node failure;
// an untyped error is backend-failure without its text.
func TestErrorInfoKeepsTheDaemonsRendering(t *testing.T) {
	for _, c := range []struct {
		err  error
		want ErrorInfo
	}{
		{&client.Error{Status: 409, Code: sandbox.FloorUnmet, Message: "floor-unmet: no usable backend"},
			ErrorInfo{Class: sandbox.FloorUnmet, Message: "floor-unmet: no usable backend"}},
		{&client.Error{Status: 400, Code: sandbox.BadInput, Message: "bad-input (argv): x", Field: "argv"},
			ErrorInfo{Class: sandbox.BadInput, Message: "bad-input (argv): x", Field: "argv"}},
		{context.Canceled, ErrorInfo{Class: sandbox.Killed, Message: "killed: the tool call was cancelled or ran out of time"}},
		{errors.New("open /var/secret: permission denied"),
			ErrorInfo{Class: sandbox.BackendFailure, Message: sandbox.Public(errors.New("x"))}},
	} {
		if got := errorInfo(c.err); got != c.want {
			t.Errorf("%v: %+v, want %+v", c.err, got, c.want)
		}
	}
}

// TestLastRuneStart: where read_file's cut drops a rune the cap split.
func TestLastRuneStart(t *testing.T) {
	b := []byte("aé") // 'a', 0xc3, 0xa9
	if got := lastRuneStart(b[:2]); got != 1 {
		t.Fatalf("lastRuneStart(a + half é) = %d, want 1", got)
	}
	if got := lastRuneStart(b); got != 1 {
		t.Fatalf("lastRuneStart(aé) = %d, want 1", got)
	}
}
