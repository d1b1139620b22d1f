package sandbox

import (
	"errors"
	"fmt"
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

// Classes lists every non-OK class.
var Classes = []Class{BadInput, FloorUnmet, Timeout, OOM, OutOfFuel, Killed, BackendFailure, Lost, Unenforceable}

func (c Class) Error() string { return string(c) }

// ErrFloorLowered is returned when configuration tries to lower a trust floor
// below its default without the explicit override.
var ErrFloorLowered = errors.New("trust floor lowered without override")

// Error is a typed error: a class, the input field at fault (if any), and a
// message for people. It unwraps to its Class and to the cause.
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
	Reason   string   `json:"reason"`
}

// FloorError is the FloorUnmet error: the required strength and, for every
// backend at or above it, why it was not usable.
type FloorError struct {
	Required   Strength     `json:"required"`
	Kind       WorkloadKind `json:"kind"`
	Rejections []Rejection  `json:"rejections"`
}

func (e *FloorError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "floor-unmet: no usable backend at or above %s for a %s workload", e.Required, e.Kind)
	if len(e.Rejections) == 0 {
		b.WriteString(": no backend is registered at that strength")
	}
	for _, r := range e.Rejections {
		fmt.Fprintf(&b, "; %s: %s", r.Backend, r.Reason)
	}
	return b.String()
}

// Unwrap makes errors.Is(err, FloorUnmet) true.
func (e *FloorError) Unwrap() error { return FloorUnmet }
