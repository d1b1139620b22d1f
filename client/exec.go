package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// States of a session's exec on the wire (the same words as package store).
const (
	ExecRunning     = "running"
	ExecDone        = "done"        // ran; Result says how it ended
	ExecFailed      = "failed"      // could not run; Result carries the class
	ExecInterrupted = "interrupted" // the daemon stopped while it ran
	ExecKilled      = "killed"      // a background exec killed while it ran (by request or with its session)
)

// EventExit is the last event of an exec's stream: Exec is its final
// record.
const EventExit = "exit"

// Exec is the API's view of one exec in a session: what POST
// .../exec?wait=0 (or with "background": true) answers and GET
// .../exec/{eid} returns. A running background exec read through
// .../processes/{eid} carries its output so far in Result.
type Exec struct {
	ID      string   `json:"id"`
	Session string   `json:"session"`
	Argv    []string `json:"argv"`
	Dir     string   `json:"dir,omitempty"`
	// Background is set for a background exec, Pid to its process's pid
	// inside the sandbox (processes.go).
	Background bool            `json:"background,omitempty"`
	OpenStdin  bool            `json:"open_stdin,omitempty"` // its stdin takes writes (WriteStdin)
	Pid        int             `json:"pid,omitempty"`
	State      string          `json:"state"`
	Started    time.Time       `json:"started"`
	Ended      time.Time       `json:"ended,omitzero"`
	Result     *sandbox.Result `json:"result,omitempty"` // once it has ended
}

func execPath(id, eid string) string { return sessionPath(id) + "/exec/" + url.PathEscape(eid) }

// StartExec starts e in session id without waiting for it to end
// (POST .../exec?wait=0) and returns its record, running; follow it with
// ExecEvents, read its end with GetExec.
func (c *Client) StartExec(ctx context.Context, id string, e *sandbox.Exec) (*Exec, error) {
	body, err := json.Marshal(e)
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BadInput, err, "encode exec")
	}
	var out Exec
	return &out, c.do(ctx, http.MethodPost, sessionPath(id)+"/exec?wait=0", body, &out)
}

// GetExec returns exec eid of session id.
func (c *Client) GetExec(ctx context.Context, id, eid string) (*Exec, error) {
	var out Exec
	return &out, c.do(ctx, http.MethodGet, execPath(id, eid), nil, &out)
}

// ExecEvents streams exec eid's events to fn — stdout and stderr chunks
// as the command produces them, then the exit event — until the exit
// event, ctx ends or fn returns an error. after resumes a stream: events
// up to that sequence number are skipped (zero: from the start).
func (c *Client) ExecEvents(ctx context.Context, id, eid string, after int, fn func(Event) error) error {
	return c.events(ctx, execPath(id, eid)+"/events", after, EventExit, fn)
}

// events reads the event stream at path until an event of type last.
func (c *Client) events(ctx context.Context, path string, after int, last string, fn func(Event) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return sandbox.Wrap(sandbox.BadInput, err, "request")
	}
	if after > 0 {
		req.Header.Set("Last-Event-ID", strconv.Itoa(after))
	}
	resp, err := c.doRequest(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 256<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue // "event:", "id:", comments and blank separators
		}
		var ev Event
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return fmt.Errorf("client: bad event: %w", err)
		}
		if err := fn(ev); err != nil {
			return err
		}
		if ev.Type == last {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.ErrUnexpectedEOF
}
