package client

import (
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// States of an invocation on the wire (the same words as package store).
const (
	StateQueued  = "queued"
	StateRunning = "running"
	StateDone    = "done"   // ran; Result says how it ended
	StateFailed  = "failed" // could not run; Result.Class says why
	StateLost    = "lost"   // the daemon died while it ran; Result.Error says why
)

// Terminal reports whether state is final.
func Terminal(state string) bool {
	return state == StateDone || state == StateFailed || state == StateLost
}

// Invocation is the API's view of one invocation: GET /v1/invocations/{id}.
type Invocation struct {
	ID          string          `json:"id"`
	Tenant      string          `json:"tenant"`
	SpecDigest  string          `json:"spec_digest"`
	Backend     string          `json:"backend,omitempty"`
	State       string          `json:"state"`
	Transitions []Transition    `json:"transitions"`
	Result      *sandbox.Result `json:"result,omitempty"`
	Created     time.Time       `json:"created"`
	// Where it ran: the region and zone of the node that ran it (its
	// operator's config) and the node's name. Empty on a node with no
	// region.
	Region string `json:"region,omitempty"`
	Zone   string `json:"zone,omitempty"`
	Node   string `json:"node,omitempty"`
}

// Transition is one state change with its time.
type Transition struct {
	State string    `json:"state"`
	At    time.Time `json:"at"`
}

// ErrorBody is every error response's body.
type ErrorBody struct {
	Code    sandbox.Class `json:"code"`
	Message string        `json:"message"`
	Field   string        `json:"field,omitempty"`
}

// Event types of GET /v1/invocations/{id}/events (and, stdout and stderr,
// of an exec's events, which end with EventExit).
const (
	EventState  = "state"  // State and At are set
	EventStdout = "stdout" // Data is a chunk of standard output, sent as it was produced
	EventStderr = "stderr" // Data is a chunk of standard error, sent as it was produced
	EventResult = "result" // Invocation is the final record; the stream ends
)

// Event is one server-sent event. Its SSE "event:" line is Type and its
// "data:" line is this struct as JSON.
type Event struct {
	Seq        int         `json:"seq"`
	Type       string      `json:"type"`
	State      string      `json:"state,omitempty"`
	At         time.Time   `json:"at,omitzero"`
	Data       []byte      `json:"data,omitempty"`
	Invocation *Invocation `json:"invocation,omitempty"`
	Exec       *Exec       `json:"exec,omitempty"` // EventExit: the exec's final record
}
