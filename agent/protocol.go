package agent

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// MaxFrame bounds one frame: a job carries at most stdin and files (bounded
// by package sandbox), a reply at most two capped streams.
const MaxFrame = 160 << 20

// frameChunk is what ReadFrame reserves before a frame's bytes arrive. A
// frame's length is the peer's claim (a sandbox's agent, a guest), so memory
// grows with the bytes the peer actually sends, never with the claim alone.
const frameChunk = 64 << 10

// ErrFrameTooLarge is returned for a frame over MaxFrame; the stream is then
// unusable and must be closed.
var ErrFrameTooLarge = errors.New("agent: frame too large")

// Job is one unit of work for the agent.
type Job struct {
	ID    string   `json:"id"`
	Argv  []string `json:"argv"`
	Env   []string `json:"env"` // complete; nothing inherited
	Dir   string   `json:"dir,omitempty"`
	Stdin []byte   `json:"stdin,omitempty"`
	Files []File   `json:"files,omitempty"` // written under Dir before the start
	// Wall is the deadline from start; zero means none (the host enforces
	// its own deadline regardless).
	Wall time.Duration `json:"wall,omitempty"`
	// Output caps each of stdout and stderr.
	Output int64 `json:"output"`
	// Shutdown asks the agent to exit after replying (no job is run if Argv
	// is empty).
	Shutdown bool `json:"shutdown,omitempty"`
	// Rlimits are set on the agent itself (soft and hard) before anything
	// else, so this job and every later one inherit them. Hard limits can
	// only go down: a sandbox's agent is claimed once and never raised.
	// RLIMIT_NPROC counts the job's tasks alone: the agent adds its own
	// threads (SetRlimits).
	Rlimits []Rlimit `json:"rlimits,omitempty"`
	// TraceStopIsExit makes the agent take the leader's ptrace-stop for
	// its exit, as it did before issue #25's fix: battery row 94's
	// positive control only, set by a weakened backend.
	TraceStopIsExit bool `json:"trace_stop_is_exit,omitempty"`
	// Reexec, on a job without Argv, asks a container's agent restored
	// from a checkpoint to replace itself with a fresh start of its own
	// binary (Reexec); the new process answers it (Thawed).
	Reexec bool `json:"reexec,omitempty"`
	// Draw, on a job without Argv, asks for the draw the agent made from
	// its PRNG when it began serving (Reply.Draw): state seeded before a
	// checkpoint, which every clone of a golden that skipped its Reexec
	// shares (battery row 87 compares clones').
	Draw bool `json:"draw,omitempty"`
	// File, on a job without Argv, is one file operation in Dir (a
	// session's workspace), confined to it; Reply.File answers it.
	File *sandbox.FileOp `json:"file,omitempty"`
	// Sweep asks the agent, after the job, to kill every other process in
	// its pid namespace and reap them before it replies (a session's exec:
	// nothing it started outlives it, even what left the job's process
	// group). Only an agent that is its namespace's init can; Reply.Unswept
	// says why one could not.
	Sweep bool `json:"sweep,omitempty"`
	// Stream asks for the job's output while it runs: the agent sends an
	// Output frame (a Reply with Out set) for each piece of stdout or
	// stderr as it keeps it, and the final Reply then carries no output
	// bytes (the host has them), only the truncated flags.
	Stream bool `json:"stream,omitempty"`
	// Background starts the job's command in a session of its own and
	// replies as soon as it runs (Reply.Pid), without waiting for it: the
	// agent holds it (background.go) until a Procs kill, its output capped
	// at Output. No Stdin, no Wall.
	Background bool `json:"background,omitempty"`
	// OpenStdin gives a Background job a stdin pipe the host writes to
	// with Procs writes (ProcsWrite); without it its stdin is /dev/null.
	OpenStdin bool `json:"open_stdin,omitempty"`
	// Procs, on a job without Argv, lists, reads or kills the background
	// processes (Reply.Procs); it never waits on one.
	Procs *ProcsJob `json:"procs,omitempty"`
}

// Output is one piece of a streaming job's output: Fd 1 is stdout, 2
// stderr.
type Output struct {
	Fd   int    `json:"fd"`
	Data []byte `json:"data"`
}

// Rlimit is one resource limit, by its Linux number (RLIMIT_NOFILE, …).
type Rlimit struct {
	Resource int    `json:"resource"`
	Cur      uint64 `json:"cur"`
	Max      uint64 `json:"max"`
}

// File is a file the agent writes before running a job, relative to Dir.
type File struct {
	Path string `json:"path"`
	Data []byte `json:"data"`
	Mode uint32 `json:"mode,omitempty"`
	// From, instead of Data, names a file the host placed in the
	// sandbox's job directory (a large one: megabytes through the
	// protocol cost seconds under gVisor); the agent copies it to Path and
	// removes it.
	From string `json:"from,omitempty"`
}

// Reply is the agent's answer to one Job.
type Reply struct {
	ID              string        `json:"id"`
	ExitCode        int           `json:"exit_code"`
	Signal          string        `json:"signal,omitempty"`
	TimedOut        bool          `json:"timed_out,omitempty"`
	Stdout          []byte        `json:"stdout"`
	Stderr          []byte        `json:"stderr"`
	StdoutTruncated bool          `json:"stdout_truncated,omitempty"`
	StderrTruncated bool          `json:"stderr_truncated,omitempty"`
	Wall            time.Duration `json:"wall"`
	CPU             time.Duration `json:"cpu"`
	MaxRSS          int64         `json:"max_rss"` // bytes, largest child
	// Error is set when the agent could not run the job at all (e.g. the
	// program does not exist); ExitCode is then 127.
	Error string `json:"error,omitempty"`
	// Thawed is set on the answer to a Reexec job: the fresh agent's view.
	Thawed *Thawed `json:"thawed,omitempty"`
	// Draw answers a Draw job.
	Draw uint64 `json:"draw,omitempty"`
	// File answers a File job that succeeded. One that failed sets Error
	// and FileClass: sandbox.NotFound for a missing path, else
	// sandbox.BadInput (the path escapes, names a directory, …).
	File      *sandbox.FileReply `json:"file,omitempty"`
	FileClass sandbox.Class      `json:"file_class,omitempty"`
	// Unswept is set when a Sweep job's sweep failed: processes may be
	// left, and the host must not trust the sandbox with another job.
	Unswept string `json:"unswept,omitempty"`
	// Out makes this frame an Output frame of a streaming job, sent before
	// its final Reply; nothing else in it is set but ID.
	Out *Output `json:"out,omitempty"`
	// Pid answers a Background job that started: its leader's pid.
	Pid int `json:"pid,omitempty"`
	// Procs answers a Procs job: every held process for a list (without
	// output), the one asked for otherwise.
	Procs []sandbox.Process `json:"procs,omitempty"`
	// Written answers a Procs write: the bytes its stdin took.
	Written int `json:"written,omitempty"`
	// Class types the Error of a Background or Procs job that was refused:
	// sandbox.BadInput (one background process too many), sandbox.NotFound
	// (an id the agent does not hold), sandbox.Conflict (a write to a stdin
	// that is closed). Empty for a command that could not
	// start, which is reported as a foreground job's is.
	Class sandbox.Class `json:"class,omitempty"`
}

// WriteFrame writes v as one frame: a 4-byte big-endian length, then JSON.
func WriteFrame(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("agent: encode frame: %w", err)
	}
	if len(b) > MaxFrame {
		return ErrFrameTooLarge
	}
	buf := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[4:], b)
	_, err = w.Write(buf)
	return err
}

// ReadFrame reads one frame into v. It reads exactly the frame's bytes, and
// holds memory for no more of them than have arrived.
func ReadFrame(r io.Reader, v any) error {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrame {
		return ErrFrameTooLarge
	}
	var buf bytes.Buffer
	buf.Grow(int(min(n, frameChunk)))
	if _, err := io.CopyN(&buf, r, int64(n)); err != nil {
		if errors.Is(err, io.EOF) { // a header without its body is not a clean end
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("agent: short frame: %w", err)
	}
	if err := json.Unmarshal(buf.Bytes(), v); err != nil {
		return fmt.Errorf("agent: decode frame: %w", err)
	}
	return nil
}
