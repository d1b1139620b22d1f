package sandbox

import (
	"fmt"
	"sync"
	"time"
)

// Result is what an invocation produced. Exactly one of "ran" (Class OK or a
// workload-level class such as Timeout or OOM, with ExitCode/Signal) or
// "failed before running" (Class BadInput, FloorUnmet, BackendFailure, Lost)
// holds.
type Result struct {
	ID       string `json:"id,omitempty"`
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"` // e.g. "killed", when a signal ended it

	Stdout          []byte `json:"stdout"`
	Stderr          []byte `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	Files           []File `json:"files,omitempty"`

	Usage   Usage   `json:"usage"`
	Backend string  `json:"backend,omitempty"` // the backend that ran it
	Accel   string  `json:"accel,omitempty"`   // e.g. "kvm" or "tcg" for microvm
	Timings Timings `json:"timings"`

	Class Class  `json:"class,omitempty"` // OK on a clean run, even with a non-zero exit
	Error string `json:"error,omitempty"` // human detail for a non-OK class
}

// ExitNotStarted is the exit code of a workload whose program could not be
// started: not found, not executable, or a script whose interpreter is
// missing. Every backend reports it the same way (NotStarted), as a shell
// reports "command not found": the request was well formed, and only the
// sandbox's own filesystem (an image, a guest's rootfs) can say whether a
// path exists in it, so it is the workload's outcome, not bad input.
const ExitNotStarted = 127

// NotStarted makes res the outcome of a workload whose program could not be
// started: Class OK, exit code ExitNotStarted, and one line on stderr,
// "wovyr: WHY" (e.g. "wovyr: fork/exec /nope: no such file or directory",
// "wovyr: nope: command not found").
func NotStarted(res *Result, why string) {
	res.Class, res.Error = OK, ""
	res.ExitCode, res.Signal = ExitNotStarted, ""
	if res.Stdout == nil {
		res.Stdout = []byte{}
	}
	res.Stderr = append(res.Stderr, NotStartedLine(why)...)
}

// NotStartedLine is the stderr line NotStarted adds.
func NotStartedLine(why string) []byte { return []byte("wovyr: " + why + "\n") }

// CheckReplyOutput refuses what who (a sandbox's agent, a guest) returned
// when either stream is over limit, the cap its job was given: a reply
// from inside a sandbox is believed only within what the workload controls
// anyway. The error is a BackendFailure.
func CheckReplyOutput(who string, stdout, stderr []byte, limit int64) error {
	if int64(len(stdout)) > limit || int64(len(stderr)) > limit {
		return Errorf(BackendFailure, "", "%s returned %d and %d bytes of output, over the %d-byte cap", who, len(stdout), len(stderr), limit)
	}
	return nil
}

// AppendNotStarted appends NotStartedLine(why) to stderr, cut at limit
// bytes in all; cut reports whether it was. A reason that comes from inside
// a sandbox (its agent, a guest) is the sandbox's words, so the output cap
// holds for it as for the workload's own.
func AppendNotStarted(stderr []byte, why string, limit int64) (out []byte, cut bool) {
	out = append(stderr, NotStartedLine(why)...)
	if int64(len(out)) > limit {
		return out[:max(limit, 0)], true
	}
	return out, false
}

// Usage is what the workload consumed.
type Usage struct {
	Wall       time.Duration `json:"wall"`
	CPU        time.Duration `json:"cpu"`
	PeakMemory int64         `json:"peak_memory"`
	Fuel       uint64        `json:"fuel,omitempty"`
}

// Timings are the phase boundaries of one invocation. Zero means the phase
// was not reached.
type Timings struct {
	Queued   time.Time `json:"queued,omitzero"`
	Acquired time.Time `json:"acquired,omitzero"`
	Started  time.Time `json:"started,omitzero"`
	Finished time.Time `json:"finished,omitzero"`
}

// Capped is an io.Writer that keeps the first Limit bytes and counts the
// rest, so output is never unbounded in memory yet always drained.
type Capped struct {
	Limit     int64
	buf       []byte
	Truncated bool
	// Emit, if set, receives the bytes each Write kept, as it keeps them
	// (a live stream of what Bytes will return), valid during the call
	// only. Nil means none.
	Emit func([]byte)
}

// Write keeps what fits and drops the rest; it never fails, so a producer
// is never blocked by a full cap.
func (c *Capped) Write(p []byte) (int, error) {
	room := c.Limit - int64(len(c.buf))
	if room <= 0 {
		if len(p) > 0 {
			c.Truncated = true
		}
		return len(p), nil
	}
	kept := p
	if int64(len(p)) > room {
		kept = p[:room]
		c.Truncated = true
	}
	c.buf = append(c.buf, kept...)
	if c.Emit != nil && len(kept) > 0 {
		c.Emit(kept)
	}
	return len(p), nil
}

// Bytes returns what was kept. It is never nil.
func (c *Capped) Bytes() []byte {
	if c.buf == nil {
		return []byte{}
	}
	return c.buf
}

// SharedCapped is a Capped that several writers (a process's stdout and
// stderr, say) and readers may use at once.
type SharedCapped struct {
	mu sync.Mutex
	c  Capped
}

// NewSharedCapped returns a SharedCapped keeping at most limit bytes.
func NewSharedCapped(limit int64) *SharedCapped { return &SharedCapped{c: Capped{Limit: limit}} }

// Write implements io.Writer; it never fails (see Capped.Write).
func (s *SharedCapped) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.Write(p)
}

// Bytes returns a copy of what was kept.
func (s *SharedCapped) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.c.Bytes()...)
}

// The one wording per limit, on every backend (issue #25: each backend
// worded its timeouts its own way). Detail only the operator needs (how
// many processes the OOM killer took, whether the sandbox still answered)
// goes to the log, not into Result.Error.

// WallLimitMessage is Result.Error for a Timeout at the wall-clock limit.
func WallLimitMessage(wall time.Duration) string {
	return fmt.Sprintf("wall-clock limit %s reached", wall)
}

// CPULimitMessage is Result.Error for a Timeout at the CPU-time limit.
func CPULimitMessage(cpu time.Duration) string {
	return fmt.Sprintf("CPU time limit %s reached", cpu)
}

// MemoryLimitMessage is Result.Error for an OOM at the memory limit.
func MemoryLimitMessage(bytes int64) string {
	return fmt.Sprintf("memory limit %d bytes reached", bytes)
}
