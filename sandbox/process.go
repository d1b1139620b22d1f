package sandbox

import (
	"context"
	"time"
)

// MaxBackground bounds the background processes one session holds at once:
// running, or exited and not yet killed (each keeps up to two capped outputs
// inside the sandbox). One more is BadInput and starts nothing.
const MaxBackground = 16

// Processes is implemented by session sandboxes that can keep processes
// running between execs: a background exec (Exec.Background) is started by
// Start, survives the sweep that ends every later foreground exec, and is
// listed, read and killed here.
//
// # Why a separate interface
//
// Session.Exec promises that every process an exec started is gone when it
// returns; a background exec is the one deliberate exception and needs
// methods a sandbox without an in-sandbox agent cannot offer. A small
// optional interface keeps Session's contract whole and lets the session
// manager refuse background execs, with a typed error, on a backend that
// holds sessions but not background processes.
type Processes interface {
	// Start starts e (Background set) and returns as soon as it runs: its
	// Process, Running. A process that could not start (command not found)
	// is returned ended, as a foreground exec reports it (exit 127 and a
	// "wovyr: …" line on stderr), and is not held. One more than
	// MaxBackground is BadInput.
	Start(ctx context.Context, e *Exec) (*Process, error)
	// Processes lists the held background processes, oldest first,
	// without their output.
	Processes(ctx context.Context) ([]Process, error)
	// Process returns one held process with its output so far; an id the
	// session does not hold is NotFound.
	Process(ctx context.Context, id string) (*Process, error)
	// Kill sends SIGKILL to every process of id's session (its own and its
	// descendants'), reaps them, forgets id and returns its final state;
	// an id the session does not hold is NotFound.
	Kill(ctx context.Context, id string) (*Process, error)
}

// MaxStdinWrite bounds one write to a background process's stdin.
const MaxStdinWrite = 1 << 20

// StdinWriter is implemented by session sandboxes whose background
// processes can be started with an open stdin (Exec.OpenStdin).
type StdinWriter interface {
	// WriteStdin writes data to process id's stdin as far as its pipe
	// takes it now, never waiting for the process to read, and returns how
	// much it wrote; with end, once all of it is written, its stdin is
	// closed. A process without an open stdin (never had one, closed, or
	// stopped reading) is a Conflict; an id the session does not hold is
	// NotFound.
	WriteStdin(ctx context.Context, id string, data []byte, end bool) (int, error)
}

// Process is one background process as the sandbox reports it.
type Process struct {
	ID      string    `json:"id"`  // the exec's id
	Pid     int       `json:"pid"` // as seen inside the sandbox
	Argv    []string  `json:"argv"`
	Started time.Time `json:"started"`
	// Running is true until the process has exited and its output has been
	// read to its end (or for a moment after its exit, as a foreground
	// exec's); its output does not change afterwards.
	Running  bool      `json:"running"`
	Ended    time.Time `json:"ended,omitzero"`
	ExitCode int       `json:"exit_code"`        // once ended: its own, or 128+n for a death by signal n
	Signal   string    `json:"signal,omitempty"` // once ended by a signal
	// Killed is set by Kill on a process that was still running.
	Killed          bool   `json:"killed,omitempty"`
	Stdout          []byte `json:"stdout,omitempty"`
	Stderr          []byte `json:"stderr,omitempty"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
}
