package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
)

// Classes the API adds to sandbox's: request-level failures that no
// backend produces. They are sandbox.Class values, so ClassOf and the one
// mapping below treat them like the rest.
const (
	Unauthenticated sandbox.Class = "unauthenticated" // no or unknown bearer token
	Forbidden       sandbox.Class = "forbidden"       // the token may not do this (admin only)
	NotFound                      = sandbox.NotFound  // no such resource for this tenant
	Conflict                      = sandbox.Conflict  // the resource's state forbids it (cancel a finished run)
	TooLarge        sandbox.Class = "too-large"       // the body exceeds the cap
	RateLimited     sandbox.Class = "rate-limited"    // over the rate guard or the tenant's quota
	Unavailable     sandbox.Class = "unavailable"     // shutting down or not ready
)

// statusOf is the one place where an error class becomes an HTTP status.
//
// floor-unmet, residency-unmet and policy-unenforceable are 409: the request is well formed,
// but this node's current state (which backends are available and
// certified) cannot satisfy it; certifying a backend may change the answer.
// backend-failure is 503: the node could not serve it now, the caller may
// retry. A class that only describes how a workload ended (timeout, oom, …)
// never fails a request; it appears inside a 200 result. Were one to reach
// here it would be a 500.
func statusOf(c sandbox.Class) int {
	switch c {
	case sandbox.BadInput:
		return http.StatusBadRequest
	case Unauthenticated:
		return http.StatusUnauthorized
	case Forbidden:
		return http.StatusForbidden
	case NotFound:
		return http.StatusNotFound
	case sandbox.FloorUnmet, sandbox.Unenforceable, sandbox.ResidencyUnmet, Conflict:
		return http.StatusConflict
	case TooLarge:
		return http.StatusRequestEntityTooLarge
	case RateLimited:
		return http.StatusTooManyRequests
	case Unavailable, sandbox.BackendFailure:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// retryError carries how long a refused caller should wait.
type retryError struct {
	error
	after time.Duration
}

func (e *retryError) Unwrap() error { return e.error }

func retryAfter(err error, d time.Duration) error { return &retryError{err, d} }

// writeError writes err as the JSON error body with its mapped status, in
// its tenant rendering (sandbox.Public: no host paths, no operator
// commands). A failure of the node's own is logged whole for the operator.
func (s *Server) writeError(w http.ResponseWriter, err error) {
	if c := sandbox.ClassOf(err); c == sandbox.BackendFailure || c == sandbox.Lost {
		s.log.Warn("request failed", "class", c, "error", err.Error())
	}
	writeErrorMessage(w, err, sandbox.Public(err))
}

// writeErrorMessage writes err's body with msg as its message: the
// operator's full text on admin routes, else the tenant's.
func writeErrorMessage(w http.ResponseWriter, err error, msg string) {
	c := sandbox.ClassOf(err)
	status := statusOf(c)
	var re *retryError
	if errors.As(err, &re) {
		secs := int((re.after + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
	} else if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	if c == Unauthenticated {
		w.Header().Set("WWW-Authenticate", `Bearer realm="wovyr"`)
	}
	writeJSON(w, status, client.ErrorBody{Code: c, Message: msg, Field: sandbox.FieldOf(err)})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
