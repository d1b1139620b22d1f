package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/wovyr/wovyr/sandbox"
)

// ProcessList is GET /v1/sessions/{id}/processes: the background processes
// the session holds, oldest first.
type ProcessList struct {
	Processes []Exec `json:"processes"`
}

func processPath(id, eid string) string {
	return sessionPath(id) + "/processes/" + url.PathEscape(eid)
}

// StartBackground starts e in session id as a background exec (POST
// .../exec with "background": true) and returns its record, running, with
// its pid: it outlives later execs until it exits, is killed
// (KillProcess) or the session ends.
func (c *Client) StartBackground(ctx context.Context, id string, e *sandbox.Exec) (*Exec, error) {
	be := *e
	be.Background = true
	body, err := json.Marshal(&be)
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BadInput, err, "encode exec")
	}
	var out Exec
	return &out, c.do(ctx, http.MethodPost, sessionPath(id)+"/exec", body, &out)
}

// Processes lists the background processes session id holds.
func (c *Client) Processes(ctx context.Context, id string) ([]Exec, error) {
	var out ProcessList
	return out.Processes, c.do(ctx, http.MethodGet, sessionPath(id)+"/processes", nil, &out)
}

// Process returns background exec eid of session id, with its output so
// far.
func (c *Client) Process(ctx context.Context, id, eid string) (*Exec, error) {
	var out Exec
	return &out, c.do(ctx, http.MethodGet, processPath(id, eid), nil, &out)
}

// KillProcess kills background exec eid of session id, with every process
// of its session inside the sandbox, and returns its final record.
func (c *Client) KillProcess(ctx context.Context, id, eid string) (*Exec, error) {
	var out Exec
	return &out, c.do(ctx, http.MethodDelete, processPath(id, eid), nil, &out)
}

// StdinWrite is what POST .../processes/{eid}/stdin answers: how much of
// the body the process's stdin took (the rest is the caller's to send
// again), and whether its stdin is now closed.
type StdinWrite struct {
	Written int  `json:"written"`
	Closed  bool `json:"closed"`
}

// WriteStdin writes data to the stdin of background exec eid of session
// id (started with OpenStdin), as far as its pipe takes it now, closing
// it after all of data if end; see StdinWrite.
func (c *Client) WriteStdin(ctx context.Context, id, eid string, data []byte, end bool) (*StdinWrite, error) {
	path := processPath(id, eid) + "/stdin"
	if end {
		path += "?close=true"
	}
	if data == nil {
		data = []byte{}
	}
	var out StdinWrite
	return &out, c.doAs(ctx, http.MethodPost, path, data, "application/octet-stream", &out)
}
