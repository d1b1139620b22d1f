// Package client is the Go client of wovyr's HTTP API (/v1), and the home
// of the API's wire types, so that the server and its callers cannot
// disagree about them. The CLI's `wovyr run --remote` uses it.
//
// Errors from the API come back as *Error, which unwraps to its
// sandbox.Class: sandbox.ClassOf and errors.Is(err, sandbox.BadInput) work on
// a remote error exactly as on a local one.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/manager"
	"github.com/wovyr/wovyr/sandbox"
)

// Client talks to one wovyr daemon. It is safe for concurrent use.
type Client struct {
	base  string
	token string
	hc    *http.Client
}

// New returns a client of the daemon at baseURL (e.g. http://127.0.0.1:8080)
// authenticating with token. A nil hc means a client without an overall
// timeout (calls are bounded by their ctx).
func New(baseURL, token string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), token: token, hc: hc}
}

// Error is an error response from the API.
type Error struct {
	Status     int           // HTTP status
	Code       sandbox.Class // the error class
	Message    string
	Field      string        // the offending input field, if any
	RetryAfter time.Duration // from Retry-After on 429 and 503
}

func (e *Error) Error() string { return e.Message }

// Unwrap makes sandbox.ClassOf and errors.Is see the class.
func (e *Error) Unwrap() error { return e.Code }

// Submit posts inv. With wait > 0 the daemon holds the request until the
// invocation finishes or wait passes; the returned record's State says
// which. The tenant and id are the daemon's to set: leave them empty.
func (c *Client) Submit(ctx context.Context, inv *sandbox.Invocation, wait time.Duration) (*Invocation, error) {
	body, err := json.Marshal(inv)
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BadInput, err, "encode invocation")
	}
	var out Invocation
	return &out, c.do(ctx, http.MethodPost, "/v1/invocations"+waitQuery(wait), body, &out)
}

// Get returns the invocation id; with wait > 0 it waits up to wait for it
// to reach a terminal state.
func (c *Client) Get(ctx context.Context, id string, wait time.Duration) (*Invocation, error) {
	var out Invocation
	return &out, c.do(ctx, http.MethodGet, "/v1/invocations/"+url.PathEscape(id)+waitQuery(wait), nil, &out)
}

// Cancel cancels the invocation id and returns its record as it is then.
func (c *Client) Cancel(ctx context.Context, id string) (*Invocation, error) {
	var out Invocation
	return &out, c.do(ctx, http.MethodDelete, "/v1/invocations/"+url.PathEscape(id), nil, &out)
}

// Backends returns every backend's probe and certification.
func (c *Client) Backends(ctx context.Context) ([]manager.Status, error) {
	var out []manager.Status
	return out, c.do(ctx, http.MethodGet, "/v1/backends", nil, &out)
}

// Certify runs the escape battery for backend on the daemon and returns the
// stored record (admin token; it takes as long as the battery).
func (c *Client) Certify(ctx context.Context, backend string) (cert.Record, error) {
	var out cert.Record
	return out, c.do(ctx, http.MethodPost, "/v1/backends/"+url.PathEscape(backend)+"/certify", nil, &out)
}

// Run submits inv and waits until it ends, as a local run does: it returns
// the result of an invocation that ran (or was lost), and the typed error of
// one that could not run. If ctx ends first the invocation is cancelled and
// its final result returned.
func (c *Client) Run(ctx context.Context, inv *sandbox.Invocation) (*sandbox.Result, error) {
	const poll = 30 * time.Second
	rec, err := c.Submit(ctx, inv, poll)
	for err == nil && !Terminal(rec.State) {
		rec, err = c.Get(ctx, rec.ID, poll)
	}
	if err != nil && ctx.Err() != nil && rec != nil && rec.ID != "" {
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if _, cerr := c.Cancel(bg, rec.ID); cerr == nil {
			rec, err = c.Get(bg, rec.ID, poll)
		}
	}
	if err != nil {
		return nil, err
	}
	return ResultOf(rec)
}

// ResultOf turns a terminal record into what a local run returns: the result
// for done and lost, the typed error for failed.
func ResultOf(rec *Invocation) (*sandbox.Result, error) {
	if rec.Result == nil {
		return nil, &Error{Code: sandbox.BackendFailure, Message: fmt.Sprintf("invocation %s is %s without a result", rec.ID, rec.State)}
	}
	if rec.State == StateFailed {
		return nil, &Error{Code: rec.Result.Class, Message: rec.Result.Error}
	}
	return rec.Result, nil
}

// Events streams the invocation's events to fn until the result event (the
// last one), ctx ends or fn returns an error.
func (c *Client) Events(ctx context.Context, id string, fn func(Event) error) error {
	return c.events(ctx, "/v1/invocations/"+url.PathEscape(id)+"/events", 0, EventResult, fn)
}

func waitQuery(wait time.Duration) string {
	if wait <= 0 {
		return ""
	}
	return "?wait=" + url.QueryEscape(wait.String())
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) error {
	return c.doAs(ctx, method, path, body, "application/json", out)
}

// doAs is do with a body of content type ctype.
func (c *Client) doAs(ctx context.Context, method, path string, body []byte, ctype string, out any) error {
	resp, err := c.sendAs(ctx, method, path, body, ctype)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "decode %s %s", method, path)
	}
	return nil
}

// send performs a request with a JSON body (if any) and turns any non-2xx
// answer into an *Error.
func (c *Client) send(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	return c.sendAs(ctx, method, path, body, "application/json")
}

// sendAs is send with a body of content type ctype.
func (c *Client) sendAs(ctx context.Context, method, path string, body []byte, ctype string) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BadInput, err, "request")
	}
	if body != nil {
		req.Header.Set("Content-Type", ctype)
	}
	return c.doRequest(req)
}

// doRequest sends req with the client's token and turns any non-2xx
// answer into an *Error.
func (c *Client) doRequest(req *http.Request) (*http.Response, error) {
	method, path := req.Method, req.URL.Path
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "wovyr daemon at %s", c.base)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	e := &Error{Status: resp.StatusCode, Code: sandbox.BackendFailure}
	var eb ErrorBody
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if json.Unmarshal(raw, &eb) == nil && eb.Code != "" {
		e.Code, e.Message, e.Field = eb.Code, eb.Message, eb.Field
	} else {
		e.Message = fmt.Sprintf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, bytes.TrimSpace(raw))
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return nil, e
}

// IsStatus reports whether err is an API error with HTTP status code.
func IsStatus(err error, code int) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == code
}
