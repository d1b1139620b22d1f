package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Serve runs jobs read from rw one at a time until the stream ends, ctx is
// done, or a job asks for Shutdown. It returns nil on a clean end of stream.
func Serve(ctx context.Context, rw io.ReadWriter) error {
	born := rand.Uint64() // a Draw job's answer: state seeded before any checkpoint
	for {
		var job Job
		if err := ReadFrame(rw, &job); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		var rep Reply
		if err := SetRlimits(job.Rlimits); err != nil {
			rep = Reply{ID: job.ID, ExitCode: 127, Error: err.Error()}
		} else if job.Reexec {
			rep = Reply{ID: job.ID, ExitCode: 127, Error: reexec(job.ID).Error()} // it returns only on failure
		} else if len(job.Argv) > 0 {
			rep = Execute(ctx, job)
		} else if job.File != nil {
			rep = fileJob(job)
		} else {
			rep = Reply{ID: job.ID}
			if job.Draw {
				rep.Draw = born
			}
		}
		if job.Sweep {
			if err := sweep(); err != nil {
				rep.Unswept = err.Error()
			}
		}
		if err := WriteFrame(rw, rep); err != nil {
			return err
		}
		if job.Shutdown {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// Client is the host side of one agent connection. It is safe for
// concurrent use; jobs are serialised because the agent runs one at a time.
type Client struct {
	mu sync.Mutex
	rw io.ReadWriteCloser
}

// NewClient wraps an established connection to an agent.
func NewClient(rw io.ReadWriteCloser) *Client { return &Client{rw: rw} }

// Do sends job and waits for its reply. If ctx ends first the connection is
// closed (the agent's job can no longer be trusted to report) and ctx's error
// returned; the caller must then destroy the sandbox.
func (c *Client) Do(ctx context.Context, job Job) (Reply, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	type result struct {
		rep Reply
		err error
	}
	ch := make(chan result, 1)
	go func() {
		if err := WriteFrame(c.rw, job); err != nil {
			ch <- result{err: fmt.Errorf("agent: send job: %w", err)}
			return
		}
		var rep Reply
		if err := ReadFrame(c.rw, &rep); err != nil {
			ch <- result{err: fmt.Errorf("agent: read reply: %w", err)}
			return
		}
		ch <- result{rep: rep}
	}()
	select {
	case r := <-ch:
		if r.err == nil && r.rep.ID != job.ID {
			return Reply{}, fmt.Errorf("agent: reply for %q, want %q", r.rep.ID, job.ID)
		}
		return r.rep, r.err
	case <-ctx.Done():
		c.rw.Close()
		<-ch
		return Reply{}, ctx.Err()
	}
}

// Close closes the connection.
func (c *Client) Close() error { return c.rw.Close() }

// SetRlimits applies limits to the calling process. An RLIMIT_NPROC is the
// job's own budget: the agent's threads, which count against the same
// user's tasks, are added to it (threads.go).
func SetRlimits(limits []Rlimit) error {
	for _, r := range limits {
		if r.Resource == unix.RLIMIT_NPROC {
			n, err := threadCount()
			if err != nil {
				return fmt.Errorf("count the agent's threads: %w", err)
			}
			r.Cur, r.Max = saturatingAdd(r.Cur, uint64(n)), saturatingAdd(r.Max, uint64(n))
		}
		if err := syscall.Setrlimit(r.Resource, &syscall.Rlimit{Cur: r.Cur, Max: r.Max}); err != nil {
			return fmt.Errorf("setrlimit %d: %w", r.Resource, err)
		}
	}
	return nil
}

func saturatingAdd(a, b uint64) uint64 {
	if a+b < a {
		return ^uint64(0)
	}
	return a + b
}
