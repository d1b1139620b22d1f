package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/sandbox"
)

// interpreter is how run_code starts one language's code: the code is
// written to File in the workspace and Argv run on it, so that a traceback
// names a file and no code length limit of argv applies.
type interpreter struct {
	File string
	Argv []string
}

var interpreters = map[string]interpreter{
	"python":     {File: "main.py", Argv: []string{"python3", "main.py"}},
	"javascript": {File: "main.js", Argv: []string{"node", "main.js"}},
	"bash":       {File: "main.sh", Argv: []string{"bash", "main.sh"}},
}

// pathEnv is the environment run_code gives its interpreter: nothing is
// inherited, and an interpreter needs a PATH for its own children.
var pathEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}

// maxTimeout bounds a tool's timeout: an MCP client waits on the call, and
// most give up well before this.
const maxTimeout = 600

// RunCodeInput is run_code's arguments.
type RunCodeInput struct {
	Language string  `json:"language" jsonschema:"the language of code: python (python3), javascript (node) or bash"`
	Code     string  `json:"code" jsonschema:"the program's source; it runs as a file in an empty working directory"`
	Stdin    string  `json:"stdin,omitempty" jsonschema:"text given to the program's standard input"`
	Timeout  float64 `json:"timeout,omitempty" jsonschema:"seconds the program may run before it is killed (default 30)"`
}

// RunCommandInput is run_command's arguments.
type RunCommandInput struct {
	Argv    []string `json:"argv" jsonschema:"the program and its arguments, e.g. [\"ls\", \"-l\"]; no shell is involved (use [\"sh\", \"-c\", \"...\"] for one)"`
	Stdin   string   `json:"stdin,omitempty" jsonschema:"text given to the program's standard input"`
	Files   []FileIn `json:"files,omitempty" jsonschema:"files written into the working directory before the program starts"`
	Env     []string `json:"env,omitempty" jsonschema:"the whole environment as KEY=VALUE strings; nothing is inherited (give PATH if the program needs one)"`
	Image   string   `json:"image,omitempty" jsonschema:"the root filesystem template to run in (default: the node's); list_backends says which backends take images"`
	Timeout float64  `json:"timeout,omitempty" jsonschema:"seconds the program may run before it is killed (default 30)"`
}

// FileIn is a file a tool writes into a workspace.
type FileIn struct {
	Path     string `json:"path" jsonschema:"path relative to the working directory, e.g. data/in.csv; no .. and not absolute"`
	Content  string `json:"content" jsonschema:"the file's content, as text or (encoding base64) base64"`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64"`
	Mode     uint32 `json:"mode,omitempty" jsonschema:"permission bits as a decimal number, e.g. 493 for 0755 (default 420, 0644)"`
}

// RunOutput is how a program ended: run_code's, run_command's and exec's
// result.
type RunOutput struct {
	ExitCode        int     `json:"exit_code" jsonschema:"the program's exit status; 127 when it could not be started, 128+N when signal N ended it"`
	Signal          string  `json:"signal,omitempty" jsonschema:"the signal that ended it, if one did"`
	Stdout          string  `json:"stdout" jsonschema:"standard output (invalid UTF-8 replaced by U+FFFD)"`
	Stderr          string  `json:"stderr" jsonschema:"standard error (invalid UTF-8 replaced by U+FFFD)"`
	StdoutTruncated bool    `json:"stdout_truncated" jsonschema:"true when stdout was cut at the output cap"`
	StderrTruncated bool    `json:"stderr_truncated" jsonschema:"true when stderr was cut at the output cap"`
	Class           string  `json:"class,omitempty" jsonschema:"why it ended early, when it did: timeout, oom, out-of-fuel, killed"`
	Backend         string  `json:"backend" jsonschema:"the sandbox backend that ran it (native, wasm, container, gvisor, microvm)"`
	WallMS          float64 `json:"wall_ms" jsonschema:"how long it ran, in milliseconds"`
}

func (t *Tools) runCodeTool() (*tool, error) {
	langs := make([]any, 0, len(config.MCPLanguages))
	for _, l := range config.MCPLanguages {
		langs = append(langs, l)
	}
	return define(spec{name: "run_code", title: "Run code",
		description: "Run a snippet of python, javascript or bash in a fresh sandbox and return its exit code, stdout and stderr. " +
			"Each call starts from a clean, empty working directory with no network; nothing persists between calls (use a session for that). " +
			"Print what you want to see: only stdout and stderr come back, each cut at " + sizeText(t.cfg.MaxOutput) + ".",
		schema: func(p map[string]*jsonschema.Schema) {
			p["language"].Enum = langs
			timeoutSchema(p)
		}}, t.runCode)
}

func (t *Tools) runCode(ctx context.Context, api API, in *RunCodeInput) (*RunOutput, error) {
	it, ok := interpreters[in.Language]
	if !ok {
		return nil, sandbox.Errorf(sandbox.BadInput, "language", "unknown language %q (want python, javascript or bash)", in.Language)
	}
	img := t.cfg.Images[in.Language]
	inv := t.invocation(img, slices.Clone(it.Argv), in.Stdin, in.Timeout)
	inv.Workload.Env = slices.Clone(pathEnv)
	inv.Workload.Files = []sandbox.File{{Path: it.File, Data: []byte(in.Code)}}
	res, err := api.Run(ctx, inv)
	if sandbox.ClassOf(err) == sandbox.BadInput && errorInfo(err).Field == "workload.image" {
		return nil, sandbox.Errorf(sandbox.BadInput, "language", "language %s runs in the image %q (mcp.images.%s), which this node cannot use: %s",
			in.Language, img, in.Language, errorInfo(err).Message)
	}
	if err != nil {
		return nil, err
	}
	// The interpreter itself could not start: say which, rather than
	// hand the model a bare 127.
	if res.ExitCode == sandbox.ExitNotStarted && len(res.Stdout) == 0 && bytes.HasPrefix(res.Stderr, []byte("wovyr: ")) &&
		bytes.Contains(res.Stderr, []byte(it.Argv[0])) {
		return nil, sandbox.Errorf(sandbox.BadInput, "language", "language %s needs %s, which the sandbox (image %q; the host's on native) does not have: %s",
			in.Language, it.Argv[0], img, strings.TrimSpace(string(res.Stderr)))
	}
	return runOutput(res)
}

func (t *Tools) runCommandTool() (*tool, error) {
	return define(spec{name: "run_command", title: "Run a command",
		description: "Run one program with arguments in a fresh sandbox and return its exit code, stdout and stderr. " +
			"argv is executed directly (no shell); files are written into the empty working directory first. " +
			"No network, nothing persists between calls (use a session for that); stdout and stderr are each cut at " + sizeText(t.cfg.MaxOutput) + ".",
		schema: func(p map[string]*jsonschema.Schema) {
			p["argv"].MinItems = jsonschema.Ptr(1)
			encodingSchema(p["files"].Items.Properties)
			timeoutSchema(p)
		}}, t.runCommand)
}

func (t *Tools) runCommand(ctx context.Context, api API, in *RunCommandInput) (*RunOutput, error) {
	if len(in.Argv) == 0 || in.Argv[0] == "" {
		return nil, sandbox.Errorf(sandbox.BadInput, "argv", "argv needs a program")
	}
	files, err := filesIn(in.Files)
	if err != nil {
		return nil, err
	}
	inv := t.invocation(in.Image, in.Argv, in.Stdin, in.Timeout)
	inv.Workload.Env, inv.Workload.Files = in.Env, files
	res, err := api.Run(ctx, inv)
	if err != nil {
		return nil, err
	}
	return runOutput(res)
}

// invocation is a command invocation at the configured trust class with
// the output cap; the tenant and id are the daemon's to set.
func (t *Tools) invocation(img string, argv []string, stdin string, timeout float64) *sandbox.Invocation {
	inv := &sandbox.Invocation{Workload: sandbox.Workload{Kind: sandbox.KindCommand, Image: img, Argv: argv},
		Limits: sandbox.Limits{Wall: seconds(timeout), Output: t.cfg.MaxOutput}, Policy: sandbox.Policy{Trust: t.cfg.Trust}}
	if stdin != "" {
		inv.Workload.Stdin = []byte(stdin)
	}
	return inv
}

// runOutput is res for the model. A run that a limit or a cancellation
// ended is a tool error of that class; its output still comes back, in
// the structured content, since the model needs it to see why.
func runOutput(res *sandbox.Result) (*RunOutput, error) {
	out := &RunOutput{ExitCode: res.ExitCode, Signal: res.Signal, Stdout: text(res.Stdout), Stderr: text(res.Stderr),
		StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated, Class: string(res.Class), Backend: res.Backend,
		WallMS: float64(res.Usage.Wall.Microseconds()) / 1000}
	if res.Class != sandbox.OK {
		return out, &endedError{class: res.Class, msg: res.Error, out: out}
	}
	return out, nil
}

// endedError is a workload that ran and was ended by a limit or a cancel.
type endedError struct {
	class sandbox.Class
	msg   string
	out   *RunOutput
}

func (e *endedError) Error() string {
	if e.msg == "" {
		return string(e.class)
	}
	return string(e.class) + ": " + e.msg
}
func (e *endedError) Unwrap() error { return e.class }

func text(b []byte) string { return strings.ToValidUTF8(string(b), "\uFFFD") }

// filesIn decodes the tool's files.
func filesIn(in []FileIn) ([]sandbox.File, error) {
	out := make([]sandbox.File, 0, len(in))
	for i, f := range in {
		data, err := decodeContent(f.Content, f.Encoding, fmt.Sprintf("files[%d]", i))
		if err != nil {
			return nil, err
		}
		out = append(out, sandbox.File{Path: f.Path, Data: data, Mode: f.Mode})
	}
	return out, nil
}

// decodeContent is a file's bytes from its content and encoding.
func decodeContent(content, encoding, field string) ([]byte, error) {
	switch encoding {
	case "", "utf-8":
		return []byte(content), nil
	case "base64":
		b, err := base64.StdEncoding.DecodeString(content)
		if err != nil {
			return nil, sandbox.Errorf(sandbox.BadInput, field+".content", "content is not base64: %v", err)
		}
		return b, nil
	}
	return nil, sandbox.Errorf(sandbox.BadInput, field+".encoding", "encoding must be utf-8 or base64, not %q", encoding)
}

func seconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }

func timeoutSchema(p map[string]*jsonschema.Schema) {
	if s, ok := p["timeout"]; ok {
		s.ExclusiveMinimum, s.Maximum = jsonschema.Ptr(0.0), jsonschema.Ptr(float64(maxTimeout))
	}
}

func encodingSchema(p map[string]*jsonschema.Schema) {
	p["encoding"].Enum = []any{"utf-8", "base64"}
}

func sizeText(n int64) string {
	if n%1024 == 0 {
		return fmt.Sprintf("%d KiB", n/1024)
	}
	return fmt.Sprintf("%d bytes", n)
}
