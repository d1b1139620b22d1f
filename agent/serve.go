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
		} else if len(job.Argv) > 0 && job.Background {
			rep = bg.start(job, nil)
		} else if len(job.Argv) > 0 && job.Stream {
			rep = execute(ctx, job, nil, streamTo(rw, job.ID))
		} else if len(job.Argv) > 0 {
			rep = Execute(ctx, job)
		} else if job.File != nil {
			rep = fileJob(job)
		} else if job.Procs != nil {
			rep = bg.procsJob(job)
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

// streamTo is a streaming job's emitFunc: one Output frame per piece, on
// the job's connection. After a failed write it sends nothing more (the
// host hung up; the final reply's write reports it).
func streamTo(w io.Writer, id string) emitFunc {
	var failed bool
	return func(fd int, p []byte) {
		if failed {
			return
		}
		failed = WriteFrame(w, Reply{ID: id, Out: &Output{Fd: fd, Data: p}}) != nil
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
	return c.DoStream(ctx, job, nil)
}

// DoStream is Do for a job that may stream (Job.Stream): each Output frame
// that comes before the reply is passed to out, on the goroutine reading
// the connection, in order. An Output frame for a job that did not ask to
// stream, or for another job, is a protocol error, as is one with an fd
// other than 1 or 2; the connection is then unusable.
func (c *Client) DoStream(ctx context.Context, job Job, out func(Output)) (Reply, error) {
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
		for {
			var rep Reply
			if err := ReadFrame(c.rw, &rep); err != nil {
				ch <- result{err: fmt.Errorf("agent: read reply: %w", err)}
				return
			}
			if rep.Out == nil {
				ch <- result{rep: rep}
				return
			}
			if !job.Stream || out == nil || rep.ID != job.ID || rep.Out.Fd != 1 && rep.Out.Fd != 2 {
				ch <- result{err: fmt.Errorf("agent: unexpected output frame (job %q, fd %d)", rep.ID, rep.Out.Fd)}
				return
			}
			out(*rep.Out)
		}
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
