package mcp

import (
	"context"
	"encoding/base64"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
)

const sessionIDText = "the session's id, from create_session"

// CreateSessionInput is create_session's arguments.
type CreateSessionInput struct {
	Image       string  `json:"image,omitempty" jsonschema:"the root filesystem template (default: the node's)"`
	IdleTimeout float64 `json:"idle_timeout,omitempty" jsonschema:"seconds without a call after which the session ends by itself (default 600)"`
	Timeout     float64 `json:"timeout,omitempty" jsonschema:"seconds each exec may run at most (default 30)"`
}

// SessionOutput is a session as create_session and destroy_session return it.
type SessionOutput struct {
	SessionID   string  `json:"session_id"`
	State       string  `json:"state" jsonschema:"creating, running, ended or interrupted"`
	Backend     string  `json:"backend" jsonschema:"the sandbox backend that holds it"`
	Image       string  `json:"image,omitempty"`
	IdleTimeout float64 `json:"idle_timeout" jsonschema:"seconds without a call before it ends by itself"`
	EndReason   string  `json:"end_reason,omitempty"`
}

// ExecInput is exec's arguments.
type ExecInput struct {
	SessionID string   `json:"session_id" jsonschema:"the session's id, from create_session"`
	Argv      []string `json:"argv,omitempty" jsonschema:"the program and its arguments, run directly; give this or command"`
	Command   string   `json:"command,omitempty" jsonschema:"a shell command line, run as sh -c COMMAND; give this or argv"`
	Stdin     string   `json:"stdin,omitempty"`
	Env       []string `json:"env,omitempty" jsonschema:"the whole environment as KEY=VALUE; nothing is inherited, not even from earlier execs (default: a PATH)"`
	Dir       string   `json:"dir,omitempty" jsonschema:"working directory relative to the session's workspace (default: the workspace)"`
	Timeout   float64  `json:"timeout,omitempty" jsonschema:"seconds it may run (default and most: the session's)"`
}

// WriteFileInput is write_file's arguments.
type WriteFileInput struct {
	SessionID string `json:"session_id" jsonschema:"the session's id, from create_session"`
	FileIn
}

// WriteFileOutput is write_file's result.
type WriteFileOutput struct {
	Path  string `json:"path"`
	Bytes int    `json:"bytes" jsonschema:"bytes written"`
}

// PathInput is read_file's and list_files's arguments.
type PathInput struct {
	SessionID string `json:"session_id" jsonschema:"the session's id, from create_session"`
	Path      string `json:"path,omitempty" jsonschema:"path relative to the session's workspace (list_files: default the workspace itself)"`
}

// ReadFileOutput is read_file's result.
type ReadFileOutput struct {
	Path      string `json:"path"`
	Content   string `json:"content" jsonschema:"the file's content: text, or base64 when encoding says so"`
	Encoding  string `json:"encoding" jsonschema:"utf-8, or base64 when the file is not valid UTF-8"`
	Size      int    `json:"size" jsonschema:"the file's size in bytes"`
	Truncated bool   `json:"truncated" jsonschema:"true when content holds only the file's first bytes (the output cap)"`
}

// ListFilesOutput is list_files's result.
type ListFilesOutput struct {
	Entries []FileEntry `json:"entries"`
}

// FileEntry is one directory entry.
type FileEntry struct {
	Path string `json:"path" jsonschema:"relative to the workspace"`
	Type string `json:"type" jsonschema:"file, dir, symlink or other"`
	Size int64  `json:"size"`
	Mode uint32 `json:"mode" jsonschema:"permission bits, as a decimal number"`
}

// DestroySessionInput is destroy_session's arguments.
type DestroySessionInput struct {
	SessionID string `json:"session_id" jsonschema:"the session's id, from create_session"`
}

func (t *Tools) createSessionTool() (*tool, error) {
	return define(spec{name: "create_session", title: "Create a session",
		description: "Create a long-lived sandbox: a workspace whose files and installed state persist across exec, write_file, read_file and list_files calls. " +
			"Returns its session_id. It has no network, ends by itself after idle_timeout without a call, and should be ended with destroy_session when done.",
		schema: func(p map[string]*jsonschema.Schema) {
			timeoutSchema(p)
			p["idle_timeout"].ExclusiveMinimum, p["idle_timeout"].Maximum = jsonschema.Ptr(0.0), jsonschema.Ptr(86400.0)
		}}, t.createSession)
}

func (t *Tools) createSession(ctx context.Context, api API, in *CreateSessionInput) (*SessionOutput, error) {
	s, err := api.CreateSession(ctx, &client.SessionRequest{Image: in.Image, Policy: sandbox.Policy{Trust: t.cfg.Trust},
		Limits: sandbox.Limits{Wall: seconds(in.Timeout), Output: t.cfg.MaxOutput}, IdleTimeout: seconds(in.IdleTimeout)})
	if err != nil {
		return nil, err
	}
	return sessionOutput(s), nil
}

func sessionOutput(s *client.Session) *SessionOutput {
	return &SessionOutput{SessionID: s.ID, State: s.State, Backend: s.Backend, Image: s.Image, IdleTimeout: s.IdleTimeout.Seconds(), EndReason: s.EndReason}
}

func (t *Tools) execTool() (*tool, error) {
	return define(spec{name: "exec", title: "Run a command in a session",
		description: "Run one command in a session's workspace and return its exit code, stdout and stderr (each cut at " + sizeText(t.cfg.MaxOutput) + "). " +
			"Give argv to run a program directly, or command for a shell command line (sh -c). Files and state persist between execs; environment variables do not.",
		schema: timeoutSchema}, t.exec)
}

func (t *Tools) exec(ctx context.Context, api API, in *ExecInput) (*RunOutput, error) {
	argv := in.Argv
	switch {
	case len(argv) > 0 && in.Command != "":
		return nil, sandbox.Errorf(sandbox.BadInput, "command", "give argv or command, not both")
	case in.Command != "":
		argv = []string{"sh", "-c", in.Command}
	case len(argv) == 0 || argv[0] == "":
		return nil, sandbox.Errorf(sandbox.BadInput, "argv", "give argv (a program and its arguments) or command")
	}
	env := in.Env
	if env == nil {
		env = pathEnv
	}
	res, err := api.Exec(ctx, in.SessionID, &sandbox.Exec{Argv: argv, Env: env, Dir: in.Dir, Stdin: []byte(in.Stdin),
		Wall: seconds(in.Timeout), Output: t.cfg.MaxOutput})
	if err != nil {
		return nil, err
	}
	return runOutput(res)
}

func (t *Tools) writeFileTool() (*tool, error) {
	return define(spec{name: "write_file", title: "Write a file in a session", destructive: true,
		description: "Write a file into a session's workspace, creating its directories and replacing a file already there.",
		schema:      encodingSchema}, t.writeFile)
}

func (t *Tools) writeFile(ctx context.Context, api API, in *WriteFileInput) (*WriteFileOutput, error) {
	data, err := decodeContent(in.Content, in.Encoding, "")
	if err != nil {
		return nil, err
	}
	if err := api.Upload(ctx, in.SessionID, in.Path, data, in.Mode); err != nil {
		return nil, err
	}
	return &WriteFileOutput{Path: in.Path, Bytes: len(data)}, nil
}

func (t *Tools) readFileTool() (*tool, error) {
	return define(spec{name: "read_file", title: "Read a file in a session", readOnly: true,
		description: "Read a file from a session's workspace. Text comes back as is, anything else as base64; " +
			"content is cut at " + sizeText(t.cfg.MaxOutput) + " and says so (truncated)."}, t.readFile)
}

func (t *Tools) readFile(ctx context.Context, api API, in *PathInput) (*ReadFileOutput, error) {
	if in.Path == "" {
		return nil, sandbox.Errorf(sandbox.BadInput, "path", "read_file needs a path")
	}
	data, err := api.Download(ctx, in.SessionID, in.Path)
	if err != nil {
		return nil, err
	}
	out := &ReadFileOutput{Path: in.Path, Size: len(data), Encoding: "utf-8"}
	if int64(len(data)) > t.cfg.MaxOutput {
		data, out.Truncated = data[:t.cfg.MaxOutput], true
	}
	// A cut may split the last rune: drop its start rather than call the
	// file binary.
	if out.Truncated && !utf8.Valid(data) && utf8.Valid(data[:lastRuneStart(data)]) {
		data = data[:lastRuneStart(data)]
	}
	if utf8.Valid(data) {
		out.Content = string(data)
	} else {
		out.Content, out.Encoding = base64.StdEncoding.EncodeToString(data), "base64"
	}
	return out, nil
}

// lastRuneStart is where the last (maybe incomplete) rune of b starts.
func lastRuneStart(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			return i
		}
	}
	return len(b)
}

func (t *Tools) listFilesTool() (*tool, error) {
	return define(spec{name: "list_files", title: "List files in a session", readOnly: true,
		description: "List a directory of a session's workspace (default: the workspace itself): each entry's path, type, size and mode."}, t.listFiles)
}

func (t *Tools) listFiles(ctx context.Context, api API, in *PathInput) (*ListFilesOutput, error) {
	ents, err := api.ListFiles(ctx, in.SessionID, in.Path)
	if err != nil {
		return nil, err
	}
	out := &ListFilesOutput{Entries: make([]FileEntry, 0, len(ents))}
	for _, e := range ents {
		out.Entries = append(out.Entries, FileEntry{Path: e.Path, Type: e.Type, Size: e.Size, Mode: e.Mode})
	}
	return out, nil
}

func (t *Tools) destroySessionTool() (*tool, error) {
	return define(spec{name: "destroy_session", title: "End a session", destructive: true,
		description: "End a session: its sandbox and every file in it are destroyed. Returns its final state."}, t.destroySession)
}

func (t *Tools) destroySession(ctx context.Context, api API, in *DestroySessionInput) (*SessionOutput, error) {
	s, err := api.DeleteSession(ctx, in.SessionID)
	if err != nil {
		return nil, err
	}
	return sessionOutput(s), nil
}
