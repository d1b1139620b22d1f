// Package stream holds the live output of runs in progress: each run's
// chunks in the order they were produced, for readers that attach at any
// time and follow it until the run ends. Once a run has ended its durable
// record replaces the log (sandbox.OutputMarks, sandbox.Replay), and
// readers see the same chunks under the same sequence numbers.
//
// What it refuses to do: grow without bound (a run's chunks are bounded by
// its output caps, which every backend holds, and chunks no reader has
// seen are merged, so the chunk count grows with readers' wake-ups, not
// with the workload's writes); change a chunk a reader has seen.
package stream

import (
	"slices"
	"sync"

	"github.com/wovyr/wovyr/sandbox"
)

// Log is one run's live output. Its Add is the run's sandbox.OutputFunc.
// It is safe for concurrent use.
type Log struct {
	mu     sync.Mutex
	chunks []sandbox.Chunk
	seen   int // chunks a reader has taken: never merged into again
	ended  bool
	wake   chan struct{} // closed at the next Add or End
}

// New returns an empty log.
func New() *Log { return &Log{wake: make(chan struct{})} }

// Add appends c (it is kept as it is: OutputFunc's Data is the callee's).
// A chunk of the same stream as the last one, which no reader has taken
// yet, is merged into it, up to sandbox.ReplayChunk bytes. Adding to an
// ended log does nothing.
func (l *Log) Add(c sandbox.Chunk) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended || len(c.Data) == 0 {
		return
	}
	if n := len(l.chunks); n > l.seen && l.chunks[n-1].Stream == c.Stream && len(l.chunks[n-1].Data)+len(c.Data) <= sandbox.ReplayChunk {
		l.chunks[n-1].Data = append(l.chunks[n-1].Data, c.Data...)
	} else {
		l.chunks = append(l.chunks, sandbox.Chunk{Stream: c.Stream, Data: slices.Clip(c.Data)})
	}
	l.signal()
}

// End marks the run over: readers stop waiting. The chunks stay readable.
func (l *Log) End() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ended {
		l.ended = true
		l.signal()
	}
}

func (l *Log) signal() {
	close(l.wake)
	l.wake = make(chan struct{})
}

// Read returns the chunks from index from on (shared: read only), whether
// the run has ended, and a channel closed at the next change. The chunks
// returned are fixed from then on.
func (l *Log) Read(from int) (chunks []sandbox.Chunk, ended bool, wake <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = len(l.chunks)
	if from < len(l.chunks) {
		chunks = l.chunks[from:len(l.chunks):len(l.chunks)]
	}
	return chunks, l.ended, l.wake
}

// Chunks returns every chunk, fixing them all: what the run's record marks
// (sandbox.OutputMarks) once it has ended.
func (l *Log) Chunks() []sandbox.Chunk {
	c, _, _ := l.Read(0)
	return c
}
