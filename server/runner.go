package server

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
	"github.com/wovyr/wovyr/stream"
)

// Why an invocation's context ends early.
var (
	errCancelled = errors.New("cancelled by the caller")
	errShutdown  = errors.New("daemon shutdown")
)

// job is one accepted invocation while this daemon runs it.
type job struct {
	inv      *sandbox.Invocation
	backend  sandbox.Backend
	ticket   Ticket
	received time.Time     // the request arrived (zero: not through the API)
	accepted time.Time     // selected and admitted
	admitted time.Time     // started at once (Admission.TryAcquire); zero: it waits in Acquire
	record   atomic.Int64  // the queued record's commit, in ns
	inAccept bool          // that commit held the request (a dispatched invocation's)
	queued   chan struct{} // closed once the queued record is durable, or failed
	queueErr error         // the queued record's error, set before queued closes
	recorded atomic.Int64  // UnixNano when the terminal record was committed
	ctx      context.Context
	cancel   context.CancelCauseFunc
	started  atomic.Bool // admitted and marked running
	done     chan struct{}
	out      *stream.Log // its output while it runs (the events' live chunks)
}

// submit is the admission half of the pipeline: select (floor-unmet is a
// 409 before anything is recorded), admit, record as queued, and start the
// invocation's goroutine. inv is validated and carries its tenant and id.
//
// local says inv was submitted here, under an id this node just made
// (sandbox.NewID): the cluster (if any) is told that this node holds the
// record, and the queued record — with the start, if admission starts it
// at once — commits beside the claim and the run (ADR 0044): nothing may
// show the id before it is durable (job.awaitRecord), and a record that
// fails cancels the run. A dispatched invocation (not local) carries an id
// from the wire, which its executing node claimed already: its record is
// written before anything runs, refusing an id recorded before.
func (s *Server) submit(ctx context.Context, t *tenant, inv *sandbox.Invocation, received time.Time, local bool) (*job, error) {
	if s.closing.Load() {
		return nil, sandbox.Errorf(Unavailable, "", "the daemon is shutting down")
	}
	b, greq, err := s.selectFor(ctx, inv)
	if err != nil {
		return nil, err
	}
	if err := checkImage(b, inv); err != nil {
		return nil, err
	}
	tk := Ticket{ID: inv.ID, Tenant: t.cfg.Name, Weight: t.cfg.Weight, Backend: b.Name(), Resources: inv.Resources.Vector, GPU: greq}
	if err := s.adm.Admit(tk); err != nil {
		return nil, err
	}
	j := &job{inv: inv, backend: b, ticket: tk, received: received, accepted: time.Now(), done: make(chan struct{}),
		out: stream.New(), queued: make(chan struct{})}
	j.ctx, j.cancel = context.WithCancelCause(s.base)
	if local {
		if s.adm.TryAcquire(tk) {
			j.admitted = time.Now()
		}
		// Queued before the job's goroutine starts, so that every later
		// write of the job commits after it.
		s.store.BeginAsync(inv, store.Queued, j.accepted, s.where, b.Name(), j.admitted, func(err error) {
			j.record.Store(int64(time.Since(j.accepted)))
			if err != nil {
				err = sandbox.Wrap(sandbox.BackendFailure, err, "record invocation")
				j.cancel(err) // nothing runs on without its record
				s.log.Error("record invocation", "id", inv.ID, "tenant", inv.Tenant, "error", err)
			}
			j.queueErr = err
			close(j.queued)
			s.note.notify(inv.ID)
		})
	} else {
		if err := s.store.BeginAt(inv, store.Queued, j.accepted, s.where); err != nil {
			j.cancel(nil)
			s.adm.Done(tk)
			return nil, sandbox.Wrap(sandbox.BackendFailure, err, "record invocation")
		}
		j.record.Store(int64(time.Since(j.accepted)))
		j.inAccept = true
		close(j.queued)
	}
	if local && s.shared() {
		// Before the answer, so that the caller's next GET on any node
		// finds it, and before it runs, so that its end is recorded after
		// it. A NATS failure does not fail the invocation: this node
		// answers for it still.
		if err := s.cluster.Placed(ctx, inv, j.accepted); err != nil {
			s.log.Warn("cluster placement", "id", inv.ID, "error", err)
		}
	}
	s.mu.Lock()
	s.jobs[inv.ID] = j
	s.wg.Add(1)
	s.mu.Unlock()
	s.met.running.Inc()
	go s.execute(j)
	return j, nil
}

// awaitRecord waits until j's queued record is durable — nothing may show
// the id before — and returns its error: the record's, or ctx's cause.
func (j *job) awaitRecord(ctx context.Context) error {
	select {
	case <-j.queued:
		return j.queueErr
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// execute is the rest of the pipeline, on the invocation's own goroutine.
// Whatever happens, it records a terminal state.
func (s *Server) execute(j *job) {
	defer s.wg.Done()
	defer s.met.running.Dec()
	defer func() {
		s.mu.Lock()
		delete(s.jobs, j.inv.ID)
		s.mu.Unlock()
		close(j.done)
		if s.shared() {
			s.cluster.Freed()
		}
	}()
	defer j.cancel(nil)
	defer s.adm.Done(j.ticket)
	inv, b := j.inv, j.backend

	admitted := j.admitted
	if admitted.IsZero() {
		if err := s.adm.Acquire(j.ctx, j.ticket); err != nil || j.ctx.Err() != nil {
			s.finish(j, store.Failed, nil, sandbox.Wrap(sandbox.Killed, context.Cause(j.ctx), "cancelled before it started"), time.Time{})
			return
		}
		admitted = time.Now()
		s.store.StartAsync(inv.ID, b.Name(), admitted, func(err error) {
			if err != nil {
				s.log.Error("record start", "id", inv.ID, "error", err)
			}
			s.note.notify(inv.ID)
		})
	} else if j.ctx.Err() != nil { // admitted at once; its record holds the start
		s.finish(j, store.Failed, nil, sandbox.Wrap(sandbox.Killed, context.Cause(j.ctx), "cancelled before it started"), admitted)
		return
	}
	s.assignGPUs(inv)
	j.started.Store(true)
	s.met.phase(b.Name(), "queue", admitted.Sub(j.accepted))

	lease, err := s.acquire(j.ctx, b, inv)
	if err != nil {
		s.finish(j, store.Failed, nil, err, admitted)
		return
	}
	acquired := time.Now()
	s.met.phase(b.Name(), "prepare", acquired.Sub(admitted))
	// A used sandbox is destroyed (or verifiably reset) by the pool, never
	// handed to another tenant as it is; that happens after the result is
	// recorded, off the caller's latency.
	defer func() {
		if rerr := lease.Release(); rerr != nil {
			s.log.Error("release sandbox", "id", inv.ID, "backend", b.Name(), "error", rerr)
		}
	}()
	res, err := lease.Run(sandbox.WithOutput(j.ctx, j.out.Add), inv)
	if err != nil {
		s.finish(j, store.Failed, nil, err, admitted)
		return
	}
	res.ID, res.Backend = inv.ID, b.Name()
	res.Timings.Queued, res.Timings.Acquired = j.accepted, acquired
	s.finish(j, store.Done, res, nil, admitted)
}

// finish records the terminal state, counts it and logs it with its phase
// timings.
func (s *Server) finish(j *job, st store.State, res *sandbox.Result, runErr error, admitted time.Time) {
	inv, b := j.inv, j.backend.Name()
	if res == nil {
		// The record is the tenant's to read: it holds the tenant
		// rendering, and the log below the operator's full error.
		res = &sandbox.Result{ID: inv.ID, ExitCode: -1, Class: sandbox.ClassOf(runErr), Error: sandbox.Public(runErr)}
		res.Timings.Queued = j.accepted
		if !admitted.IsZero() {
			res.Backend = b
		}
	}
	marks, ok := sandbox.OutputMarks(j.out.Chunks(), res)
	if !ok && st == store.Done { // a failed run's result holds no output
		s.log.Warn("invocation output streamed unlike its result", "id", inv.ID, "backend", b)
	}
	now := time.Now()
	if err := s.store.Finish(inv.ID, st, res, marks, now); err != nil {
		// The record stays non-terminal and start-up will mark it lost:
		// still never silent.
		s.log.Error("record result", "id", inv.ID, "tenant", inv.Tenant, "error", err)
	}
	commit := time.Since(now)
	s.met.phase(b, "commit", commit)
	j.recorded.Store(time.Now().UnixNano())
	if s.shared() {
		// Off the caller's latency; a crash before it is taken, by the
		// other nodes, for a crash mid-run (lost): never for a success.
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.cluster.Ended(s.base, inv.ID, st); err != nil {
				s.log.Warn("cluster: record the end", "id", inv.ID, "error", err)
			}
		}()
	}
	j.out.End()
	s.note.notify(inv.ID)
	class := string(res.Class)
	if class == "" {
		class = "ok"
	}
	s.met.invocations.WithLabelValues(b, class, string(st)).Inc()
	total := now.Sub(j.accepted)
	s.met.phase(b, "total", total)
	attrs := []any{"id", inv.ID, "tenant", inv.Tenant, "backend", b, "state", st, "class", class,
		"exit_code", res.ExitCode, "total_ms", ms(total), "record_ms", ms(time.Duration(j.record.Load())), "commit_ms", ms(commit)}
	if !j.received.IsZero() {
		accept := j.accepted.Sub(j.received)
		if j.inAccept {
			accept += time.Duration(j.record.Load())
		}
		attrs = append(attrs, "accept_ms", ms(accept))
	}
	if !admitted.IsZero() {
		attrs = append(attrs, "queue_ms", ms(admitted.Sub(j.accepted)))
	}
	if runErr != nil {
		attrs = append(attrs, "error", runErr.Error())
	}
	sum := runSummary{ID: inv.ID, Tenant: inv.Tenant, Backend: b, State: string(st), Class: string(res.Class),
		ExitCode: res.ExitCode, Accepted: j.accepted, Total: total, admitted: !admitted.IsZero()}
	if sum.admitted {
		sum.Queue = admitted.Sub(j.accepted)
	}
	if t := res.Timings; !t.Acquired.IsZero() && !t.Started.IsZero() && !t.Finished.IsZero() {
		run := t.Finished.Sub(t.Started)
		s.met.phase(b, "run", run)
		attrs = append(attrs, "prepare_ms", ms(t.Acquired.Sub(admitted)), "run_ms", ms(run))
		sum.Prepare, sum.Run = t.Acquired.Sub(admitted), run
	}
	s.recent.add(sum)
	s.log.Info("invocation", attrs...)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// cancel ends the invocation id; it reports false if this daemon is not
// running it.
func (s *Server) cancel(id string, cause error) bool {
	s.mu.Lock()
	j, ok := s.jobs[id]
	s.mu.Unlock()
	if ok {
		j.cancel(cause)
	}
	return ok
}

// cancelJobs cancels every job, or only those not yet started.
func (s *Server) cancelJobs(running bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range s.jobs {
		if running || !j.started.Load() {
			j.cancel(errShutdown)
		}
	}
}

// waitDone waits until id is terminal, d passes or ctx ends, and returns
// the record as it is then.
func (s *Server) waitDone(ctx context.Context, id string, d time.Duration) (store.Invocation, error) {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	for {
		ch := s.note.wait(id)
		rec, err := s.store.Get(id)
		if err != nil || rec.State.Terminal() {
			s.note.notify(id) // nothing else will close ch
			return rec, err
		}
		if d <= 0 {
			return rec, nil
		}
		select {
		case <-ch:
		case <-timeout:
			return s.store.Get(id)
		case <-ctx.Done():
			return s.store.Get(id)
		case <-s.base.Done():
			return s.store.Get(id)
		}
	}
}

// notifier wakes whoever waits for a change of one invocation.
type notifier struct {
	mu    sync.Mutex
	chans map[string]chan struct{}
}

// wait returns a channel closed at id's next change. Take it before reading
// the state, so that no change is missed between the read and the wait.
func (n *notifier) wait(id string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.chans == nil {
		n.chans = map[string]chan struct{}{}
	}
	ch, ok := n.chans[id]
	if !ok {
		ch = make(chan struct{})
		n.chans[id] = ch
	}
	return ch
}

func (n *notifier) notify(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ch, ok := n.chans[id]; ok {
		close(ch)
		delete(n.chans, id)
	}
}

// checkImage refuses, at submit, a command workload whose image backend b
// cannot run (bad input, answered 400), or a workload b refuses here
// (sandbox.WorkloadChecker), with nothing recorded or started.
func checkImage(b sandbox.Backend, inv *sandbox.Invocation) error {
	return sandbox.CheckRunnable(b, &inv.Workload)
}
