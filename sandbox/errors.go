package sandbox

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
)

// Class is an error class: a stable code that callers branch on and that the
// HTTP API maps to a status in exactly one place. A Class is itself an error,
// so errors.Is(err, sandbox.Timeout) works on anything wrapping it.
type Class string

// Error classes. The empty Class means success.
const (
	OK             Class = ""
	BadInput       Class = "bad-input"       // the request is wrong; nothing was started
	FloorUnmet     Class = "floor-unmet"     // no certified, available backend at or above the required strength
	Timeout        Class = "timeout"         // the wall deadline passed; the workload was killed
	OOM            Class = "oom"             // the workload hit its memory limit and died of it
	OutOfFuel      Class = "out-of-fuel"     // a wasm workload used up its fuel
	Killed         Class = "killed"          // cancelled by the caller or by shutdown
	BackendFailure Class = "backend-failure" // the sandbox machinery failed, not the workload
	Lost           Class = "lost"            // the daemon died while it ran; see Result.Error for why
	Unenforceable  Class = "policy-unenforceable"
)

// Request-level classes: a request about a named, long-lived resource (a
// session, a file in its workspace) that does not exist for the caller, or
// whose state forbids it. No workload ends with them, so Classes leaves
// them out; the HTTP API maps them to 404 and 409.
const (
	NotFound Class = "not-found"
	Conflict Class = "conflict"
	// ResidencyUnmet: no region that the tenant's residency policy and the
	// invocation's request both allow can take it (package residency).
	// Refused before anything is recorded, so no workload ends with it.
	ResidencyUnmet Class = "residency-unmet"
)

// Classes lists every non-OK class a Result can carry.
var Classes = []Class{BadInput, FloorUnmet, Timeout, OOM, OutOfFuel, Killed, BackendFailure, Lost, Unenforceable}

func (c Class) Error() string { return string(c) }

// ErrFloorLowered is returned when configuration tries to lower a trust floor
// below its default without the explicit override.
var ErrFloorLowered = errors.New("trust floor lowered without override")

// Error is a typed error: a class, the input field at fault (if any), and a
// message for people. It unwraps to its Class and to the cause.
//
// Msg may reach a tenant (see Public): it says what is wrong in the
// request's own terms and holds no host detail — no host path, no operator
// command. Such detail goes in Err, which the operator sees (logs, the local
// CLI) and tenants do not where the class is the node's fault.
type Error struct {
	Class Class
	Field string // the offending input field for BadInput, e.g. "limits.memory"
	Msg   string
	Err   error // the cause, if any
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Class))
	if e.Field != "" {
		b.WriteString(" (" + e.Field + ")")
	}
	b.WriteString(": " + e.Msg)
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	return b.String()
}

// Unwrap lets errors.Is match both the class and the cause.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Class}
	}
	return []error{e.Class, e.Err}
}

// Errorf builds an *Error of class c about field.
func Errorf(c Class, field, format string, args ...any) error {
	return &Error{Class: c, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Wrap builds an *Error of class c around cause.
func Wrap(c Class, cause error, format string, args ...any) error {
	return &Error{Class: c, Msg: fmt.Sprintf(format, args...), Err: cause}
}

// ClassOf returns the class of err: OK for nil, the first Class found in its
// chain, or BackendFailure for an untyped error (fail towards "our fault").
func ClassOf(err error) Class {
	if err == nil {
		return OK
	}
	var c Class
	if errors.As(err, &c) {
		return c
	}
	return BackendFailure
}

// FieldOf returns the offending input field recorded in err, if any.
func FieldOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Field
	}
	return ""
}

// Rejection says why one backend could not take a workload.
type Rejection struct {
	Backend  string   `json:"backend"`
	Strength Strength `json:"strength"`
	// Reason is the operator's full reason (a probe's error may name host
	// paths and the command that fixes it).
	Reason string `json:"reason"`
	// Summary is the tenant's short, path-free reason, e.g. "not available
	// on this node". Empty means "not usable on this node".
	Summary string `json:"summary,omitempty"`
}

// Tenant-facing rejection summaries: what a tenant may know of this node.
const (
	SummaryUnavailable   = "not available on this node"
	SummaryUncertified   = "not certified on this node"
	SummaryNotRegistered = "not registered on this node"
	summaryUnusable      = "not usable on this node"
)

// FloorError is the FloorUnmet error: the required strength and, for every
// backend at or above it, why it was not usable.
type FloorError struct {
	Required   Strength     `json:"required"`
	Kind       WorkloadKind `json:"kind"`
	Rejections []Rejection  `json:"rejections"`
}

func (e *FloorError) Error() string {
	return e.render(func(r Rejection) string { return r.Reason })
}

// Public is the tenant's rendering: each backend's Summary instead of its
// Reason.
func (e *FloorError) Public() string {
	return e.render(func(r Rejection) string { return cmp.Or(r.Summary, summaryUnusable) })
}

// render writes the refusal with why(r) for each rejected backend.
func (e *FloorError) render(why func(Rejection) string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "floor-unmet: no usable backend at or above %s for a %s workload", e.Required, e.Kind)
	if len(e.Rejections) == 0 {
		b.WriteString(": no backend is registered at that strength")
	}
	for _, r := range e.Rejections {
		fmt.Fprintf(&b, "; %s: %s", r.Backend, why(r))
	}
	return b.String()
}

// Unwrap makes errors.Is(err, FloorUnmet) true.
func (e *FloorError) Unwrap() error { return FloorUnmet }

// Public renders err for a tenant: what went wrong and what the tenant can
// do, without this node's details. Errors that know their tenant rendering
// (a *FloorError's summaries) give it. A failure of the node itself
// (backend-failure, lost) says only that, since its causes are host paths,
// runtime output and VM consoles; the operator reads them in the log, keyed
// by the invocation id. The rest (bad input, policy, limits) is about the
// request and is rendered whole.
//
// Public is for every tenant-visible error: API bodies, records, events.
// Logs, the admin views and the local CLI use Error().
func Public(err error) string {
	if err == nil {
		return ""
	}
	var fe *FloorError
	if errors.As(err, &fe) {
		return fe.Public()
	}
	switch c := ClassOf(err); c {
	case BackendFailure:
		return string(c) + ": the sandbox machinery failed on this node (not the workload); the operator's log has the detail"
	case Lost:
		return string(c) + ": the node stopped while the invocation ran"
	}
	var e *Error
	if errors.As(err, &e) {
		return e.public()
	}
	return err.Error()
}

// public is Error() with only the causes that are safe for a tenant: a
// typed *Error (its own public form) or an error that offers Public() (a
// wasm compiler's one-line verdict). An untyped cause (an *fs.PathError
// naming a host path) is left out.
func (e *Error) public() string {
	var b strings.Builder
	b.WriteString(string(e.Class))
	if e.Field != "" {
		b.WriteString(" (" + e.Field + ")")
	}
	b.WriteString(": " + e.Msg)
	var inner *Error
	switch c := e.Err.(type) {
	case interface{ Public() string }:
		b.WriteString(": " + c.Public())
	case *fs.PathError:
		// Relative: a name inside the workspace (os.Root's errors), the
		// tenant's own; absolute would be the host's.
		if !filepath.IsAbs(c.Path) {
			b.WriteString(": " + c.Error())
		}
	case nil:
	default:
		if errors.As(c, &inner) {
			b.WriteString(": " + inner.public())
		}
	}
	return b.String()
}
