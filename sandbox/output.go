package sandbox

import (
	"bytes"
	"context"
	"sync"
)

// Stream names one of a workload's two output streams.
type Stream string

// The output streams.
const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)

// Chunk is a piece of one output stream, as the workload produced it.
type Chunk struct {
	Stream Stream
	Data   []byte
}

// OutputFunc receives a run's output while it runs, in the order it was
// produced. The chunks of one stream, concatenated, are a prefix of that
// stream in the run's Result (what the cap kept, nothing beyond it). It is
// called from the backend's goroutine and must not block for long; Data is
// the callee's to keep.
type OutputFunc func(Chunk)

type outputKey struct{}

// WithOutput returns ctx carrying fn, for a Run or a Session's Exec that
// should report its output live.
//
// # Why a context value
//
// Live output is an observer of one call, optional and one way, as
// net/http/httptrace's ClientTrace is of a request: every layer between
// the daemon and the backend (pool lease, session manager) passes the
// context through unchanged, and a backend that cannot stream ignores it —
// its output then arrives whole in the Result, which is what every
// consumer falls back to (OutputMarks).
func WithOutput(ctx context.Context, fn OutputFunc) context.Context {
	return context.WithValue(ctx, outputKey{}, fn)
}

// OutputOf returns the OutputFunc of ctx, or nil.
func OutputOf(ctx context.Context) OutputFunc {
	fn, _ := ctx.Value(outputKey{}).(OutputFunc)
	return fn
}

// OutputMark is one chunk of a durable record's output: its stream and
// length. A record keeps the marks of the chunks its live stream sent, so
// that a stream replayed from the record cuts the output at the same
// places, and an event's sequence number means the same chunk whenever it
// is read.
type OutputMark struct {
	Stream Stream `json:"stream"`
	Len    int    `json:"len"`
}

// ReplayChunk bounds one chunk that OutputMarks adds for output that was
// not streamed live.
const ReplayChunk = 16 << 10

// OutputMarks returns the marks of a finished run's output: those of the
// chunks sent live, then chunks of at most ReplayChunk bytes for the rest of
// each stream (all of it for a backend that does not stream), stdout's
// before stderr's. ok is false when the live chunks are not a prefix of
// res's output (a backend broke the OutputFunc contract): the marks then
// cut res's output afresh, and the live stream disagrees with the record,
// which wins.
func OutputMarks(live []Chunk, res *Result) (marks []OutputMark, ok bool) {
	sent := map[Stream]int{}
	ok = true
	for _, c := range live {
		full := streamOf(res, c.Stream)
		at := sent[c.Stream]
		if at+len(c.Data) > len(full) || !bytes.Equal(full[at:at+len(c.Data)], c.Data) {
			ok = false
			break
		}
		sent[c.Stream] = at + len(c.Data)
		marks = append(marks, OutputMark{Stream: c.Stream, Len: len(c.Data)})
	}
	if !ok {
		marks, sent = nil, map[Stream]int{}
	}
	for _, st := range []Stream{Stdout, Stderr} {
		rest := len(streamOf(res, st)) - sent[st]
		for rest > 0 {
			n := min(rest, ReplayChunk)
			marks = append(marks, OutputMark{Stream: st, Len: n})
			rest -= n
		}
	}
	return marks, ok
}

// Replay cuts res's output at marks, as OutputMarks made them. A mark
// beyond the output (a corrupt record) ends the replay there.
func Replay(marks []OutputMark, res *Result) []Chunk {
	at := map[Stream]int{}
	out := make([]Chunk, 0, len(marks))
	for _, m := range marks {
		full := streamOf(res, m.Stream)
		i := at[m.Stream]
		if m.Len <= 0 || i+m.Len > len(full) {
			break
		}
		out = append(out, Chunk{Stream: m.Stream, Data: full[i : i+m.Len]})
		at[m.Stream] = i + m.Len
	}
	return out
}

func streamOf(res *Result, st Stream) []byte {
	if res == nil {
		return nil
	}
	switch st {
	case Stdout:
		return res.Stdout
	case Stderr:
		return res.Stderr
	}
	return nil
}

// Collector gathers a streamed run's output as its pieces arrive, keeps
// each stream to a cap and forwards every piece it keeps to an OutputFunc.
// A backend whose pieces come from inside the sandbox (its agent, a guest)
// builds the Result's output from them, so what was streamed and what is
// recorded are the same bytes by construction. It is safe for concurrent
// use and calls fn under its lock, so fn's calls never overlap.
type Collector struct {
	fn    OutputFunc
	limit int64

	mu             sync.Mutex
	stdout, stderr []byte
	over           bool
}

// NewCollector returns a collector forwarding to fn (nil: collect only)
// and keeping at most limit bytes of each stream.
func NewCollector(fn OutputFunc, limit int64) *Collector {
	return &Collector{fn: fn, limit: limit}
}

// Add takes piece p of stream st (copied). A piece past the cap is dropped
// and marks the collector Over: a streamer that keeps to its cap (an
// agent holds the job's) never sends one.
func (c *Collector) Add(st Stream, p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	buf := &c.stdout
	if st == Stderr {
		buf = &c.stderr
	} else if st != Stdout {
		c.over = true
		return
	}
	if c.over || int64(len(*buf)+len(p)) > c.limit {
		c.over = true
		return
	}
	if len(p) == 0 {
		return
	}
	at := len(*buf)
	*buf = append(*buf, p...)
	if c.fn != nil {
		c.fn(Chunk{Stream: st, Data: bytes.Clone((*buf)[at:])})
	}
}

// Output returns what was kept of each stream (never nil) and whether a
// piece broke the cap.
func (c *Collector) Output() (stdout, stderr []byte, over bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte{}, c.stdout...), append([]byte{}, c.stderr...), c.over
}
