package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/wovyr/wovyr/resource"
	"github.com/wovyr/wovyr/sandbox"
)

// States of a session on the wire (the same words as package store).
const (
	SessionCreating    = "creating"
	SessionRunning     = "running"
	SessionPaused      = "paused"      // Resume says how it comes back
	SessionEnded       = "ended"       // EndReason says why
	SessionInterrupted = "interrupted" // the daemon stopped while it was live
)

// SessionRequest is POST /v1/sessions's body. Durations are nanoseconds.
type SessionRequest struct {
	Image string `json:"image,omitempty"`
	// Limits bound the whole session (memory, pids, disk, open files; CPU
	// per exec); Wall and Output are each exec's default and ceiling.
	Limits    sandbox.Limits  `json:"limits"`
	Policy    sandbox.Policy  `json:"policy"`
	Resources resource.Vector `json:"resources"`
	// IdleTimeout ends a session without an exec or file operation for
	// that long (zero: 10m);
	// MaxLifetime ends it that long after its creation (zero: 1h, or the
	// idle timeout if longer; at most 24h).
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	MaxLifetime time.Duration `json:"max_lifetime,omitempty"`
}

// Session is the API's view of one session: GET /v1/sessions/{id}.
type Session struct {
	ID          string              `json:"id"`
	Tenant      string              `json:"tenant"`
	Backend     string              `json:"backend"`
	State       string              `json:"state"`
	Image       string              `json:"image,omitempty"`
	Limits      sandbox.Limits      `json:"limits"`
	Policy      sandbox.Policy      `json:"policy"`
	IdleTimeout time.Duration       `json:"idle_timeout"`
	MaxLifetime time.Duration       `json:"max_lifetime"`
	Created     time.Time           `json:"created"`
	LastActive  time.Time           `json:"last_active,omitzero"` // while live
	Execs       int                 `json:"execs"`
	EndReason   string              `json:"end_reason,omitempty"`
	Transitions []SessionTransition `json:"transitions"`
	// Resume says how the session resumes from a pause: "restart" (its
	// files kept, its processes not). Empty until its first pause.
	Resume string `json:"resume,omitempty"`
	// PausedBytes is the size of its kept workspace while paused.
	PausedBytes int64 `json:"paused_bytes,omitempty"`
}

// SessionTransition is one state change of a session.
type SessionTransition struct {
	State  string    `json:"state"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason,omitempty"`
}

// SessionList is GET /v1/sessions's body.
type SessionList struct {
	Sessions []Session `json:"sessions"`
}

// FileList is the body of a listing: GET /v1/sessions/{id}/files.
type FileList struct {
	Entries []sandbox.FileInfo `json:"entries"`
}

func sessionPath(id string) string { return "/v1/sessions/" + url.PathEscape(id) }

// CreateSession creates a session and returns it running.
func (c *Client) CreateSession(ctx context.Context, req *SessionRequest) (*Session, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BadInput, err, "encode session")
	}
	var out Session
	return &out, c.do(ctx, http.MethodPost, "/v1/sessions", body, &out)
}

// Session returns the session id.
func (c *Client) Session(ctx context.Context, id string) (*Session, error) {
	var out Session
	return &out, c.do(ctx, http.MethodGet, sessionPath(id), nil, &out)
}

// Sessions lists the tenant's sessions, live and recently ended.
func (c *Client) Sessions(ctx context.Context) ([]Session, error) {
	var out SessionList
	return out.Sessions, c.do(ctx, http.MethodGet, "/v1/sessions", nil, &out)
}

// DeleteSession ends the session id and returns its final view.
func (c *Client) DeleteSession(ctx context.Context, id string) (*Session, error) {
	var out Session
	return &out, c.do(ctx, http.MethodDelete, sessionPath(id), nil, &out)
}

// Exec runs e in the session id and returns how it ended.
func (c *Client) Exec(ctx context.Context, id string, e *sandbox.Exec) (*sandbox.Result, error) {
	body, err := json.Marshal(e)
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BadInput, err, "encode exec")
	}
	var out sandbox.Result
	return &out, c.do(ctx, http.MethodPost, sessionPath(id)+"/exec", body, &out)
}

func fileQuery(p string) string { return "?path=" + url.QueryEscape(p) }

// PauseSession pauses session id now: its workspace kept, its sandbox
// given back. Any later exec or file request resumes it.
func (c *Client) PauseSession(ctx context.Context, id string) (*Session, error) {
	var out Session
	return &out, c.do(ctx, http.MethodPost, sessionPath(id)+"/pause", nil, &out)
}

// ResumeSession resumes paused session id now.
func (c *Client) ResumeSession(ctx context.Context, id string) (*Session, error) {
	var out Session
	return &out, c.do(ctx, http.MethodPost, sessionPath(id)+"/resume", nil, &out)
}

// UploadArchive extracts the tar archive data into directory dir of
// session id's workspace ("" is the workspace itself). An archive with an
// entry that cannot be extracted there is refused whole.
func (c *Client) UploadArchive(ctx context.Context, id, dir string, data []byte) error {
	if data == nil {
		data = []byte{}
	}
	resp, err := c.sendAs(ctx, http.MethodPut, sessionPath(id)+"/files/archive"+fileQuery(dir), data, "application/x-tar")
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// DownloadArchive returns directory dir of session id's workspace ("" is
// the workspace itself) as a tar archive.
func (c *Client) DownloadArchive(ctx context.Context, id, dir string) ([]byte, error) {
	resp, err := c.send(ctx, http.MethodGet, sessionPath(id)+"/files/archive"+fileQuery(dir), nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, sandbox.MaxFileBytes+1))
	if err == nil && len(b) > sandbox.MaxFileBytes {
		err = fmt.Errorf("client: the archive of %q is over %d bytes", dir, sandbox.MaxFileBytes)
	}
	return b, err
}

// Upload writes data at path (relative to the workspace) in the session
// id, with permission bits mode (zero: 0644).
func (c *Client) Upload(ctx context.Context, id, path string, data []byte, mode uint32) error {
	q := fileQuery(path)
	if mode != 0 {
		q += fmt.Sprintf("&mode=%o", mode)
	}
	if data == nil {
		data = []byte{}
	}
	resp, err := c.sendAs(ctx, http.MethodPut, sessionPath(id)+"/files/content"+q, data, "application/octet-stream")
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// Download returns the file at path in the session id.
func (c *Client) Download(ctx context.Context, id, path string) ([]byte, error) {
	resp, err := c.send(ctx, http.MethodGet, sessionPath(id)+"/files/content"+fileQuery(path), nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, sandbox.MaxFileBytes+1))
	if err == nil && len(b) > sandbox.MaxFileBytes {
		err = fmt.Errorf("client: %s is over %d bytes", path, sandbox.MaxFileBytes)
	}
	return b, err
}

// RemoveFile removes path (a directory with its contents) in the session id.
func (c *Client) RemoveFile(ctx context.Context, id, path string) error {
	resp, err := c.send(ctx, http.MethodDelete, sessionPath(id)+"/files/content"+fileQuery(path), nil)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// Stat describes path in the session id (a symlink itself, not its target).
func (c *Client) Stat(ctx context.Context, id, path string) (*sandbox.FileInfo, error) {
	var out sandbox.FileInfo
	return &out, c.do(ctx, http.MethodGet, sessionPath(id)+"/files/stat"+fileQuery(path), nil, &out)
}

// ListFiles lists the directory dir ("" or ".": the workspace) in the
// session id.
func (c *Client) ListFiles(ctx context.Context, id, dir string) ([]sandbox.FileInfo, error) {
	var out FileList
	return out.Entries, c.do(ctx, http.MethodGet, sessionPath(id)+"/files"+fileQuery(dir), nil, &out)
}
