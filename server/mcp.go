package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/mcp"
)

// inProcessBase is the base URL of the API as the MCP tools call it: never
// dialled, the requests go to the handler in this process (handlerTransport).
const inProcessBase = "http://wovyr.in-process"

// mcpRoute is /mcp: the MCP tools over streamable HTTP, authenticated as
// every route is (a missing or unknown token is the API's 401 before the
// MCP layer sees the request). Each MCP session is bound to the tenant of
// the token that opened it, and its tools call the API in-process with
// that same token: the same authentication, rate guard, validation, floor,
// admission and egress as a client's call, and nothing of another tenant's
// (ADR 0030).
func (s *Server) mcpRoute(api http.Handler) func(http.ResponseWriter, *http.Request, *tenant) {
	local := &http.Client{Transport: handlerTransport{api}}
	h := s.tools.Handler(func(r *http.Request) (mcp.API, string) {
		t, _ := r.Context().Value(ctxKey{}).(*tenant)
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if t == nil || tok == "" {
			return nil, ""
		}
		return client.New(inProcessBase, tok, local), t.cfg.Name
	}, s.cfg.MaxBodyBytes)
	return func(w http.ResponseWriter, r *http.Request, t *tenant) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, t)))
	}
}

// handlerTransport is an http.RoundTripper that serves each request with h
// in this process and buffers the answer: no socket, no second
// implementation of any route.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil {
		req.Body = http.NoBody
	}
	rec := &recorder{header: http.Header{}}
	t.h.ServeHTTP(rec, req)
	if rec.code == 0 {
		rec.code = http.StatusOK
	}
	return &http.Response{Status: strconv.Itoa(rec.code) + " " + http.StatusText(rec.code), StatusCode: rec.code,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: rec.header, ContentLength: int64(rec.body.Len()),
		Body: io.NopCloser(&rec.body), Request: req}, nil
}

// recorder is the http.ResponseWriter handlerTransport hands the handler.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}
