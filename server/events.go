package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// keepaliveEvery is how often an idle event stream sends a comment line.
const keepaliveEvery = 15 * time.Second

// eventStream writes server-sent events: each event's "id:" is its
// sequence number, and events up to the request's Last-Event-ID are
// skipped, so a resumed stream continues where the last one stopped.
//
// # Why whole timelines
//
// A stream's events are a pure function of what is known of the run: its
// durable record, and while it runs, its live chunks (stream.Log). Each
// wake-up rebuilds the timeline and sends the events past the last one
// sent. The live chunks are a prefix of those the record marks once the
// run has ended (sandbox.OutputMarks), so the sequence number of an event
// means the same event whether it was read live, late, after a restart or
// resumed.
type eventStream struct {
	w    http.ResponseWriter
	fl   http.Flusher
	last int // Last-Event-ID
	sent int // events of the timeline already sent (or skipped)
}

// startEvents answers r with an event stream, or writes why it cannot.
func (s *Server) startEvents(w http.ResponseWriter, r *http.Request) (*eventStream, bool) {
	fl, ok := w.(http.Flusher)
	if !ok {
		s.writeError(w, fmt.Errorf("streaming unsupported"))
		return nil, false
	}
	last := 0
	if h := r.Header.Get("Last-Event-ID"); h != "" {
		n, err := strconv.Atoi(h)
		if err != nil || n < 0 {
			s.writeError(w, sandbox.Errorf(sandbox.BadInput, "Last-Event-ID", "must be an event's sequence number"))
			return nil, false
		}
		last = n
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	return &eventStream{w: w, fl: fl, last: last}, true
}

// send writes the events of timeline past those sent, numbered by their
// place in it (from 1), and flushes.
func (e *eventStream) send(timeline []client.Event) {
	for ; e.sent < len(timeline); e.sent++ {
		seq := e.sent + 1
		if seq <= e.last {
			continue
		}
		ev := timeline[e.sent]
		ev.Seq = seq
		b, _ := json.Marshal(ev)
		fmt.Fprintf(e.w, "id: %d\nevent: %s\ndata: %s\n\n", seq, ev.Type, b)
	}
	e.fl.Flush()
}

func (e *eventStream) keepalive() {
	fmt.Fprint(e.w, ": keepalive\n\n")
	e.fl.Flush()
}

// chunkEvents appends chunks as stdout and stderr events.
func chunkEvents(out []client.Event, chunks []sandbox.Chunk) []client.Event {
	for _, c := range chunks {
		out = append(out, client.Event{Type: string(c.Stream), Data: c.Data})
	}
	return out
}

// invocationTimeline is an invocation's events: its state changes up to
// running, the output chunks (live while it runs, the record's once it
// has ended), its terminal state, then the final record. Chunks wait for
// the running state to be recorded, which precedes them.
func invocationTimeline(rec store.Invocation, live []sandbox.Chunk) []client.Event {
	var out []client.Event
	for _, tr := range rec.Transitions {
		if tr.State.Terminal() {
			break
		}
		out = append(out, client.Event{Type: client.EventState, State: string(tr.State), At: tr.At})
	}
	if !rec.State.Terminal() {
		if rec.State == store.Running {
			out = chunkEvents(out, live)
		}
		return out
	}
	out = chunkEvents(out, sandbox.Replay(rec.Chunks, rec.Result))
	for _, tr := range rec.Transitions {
		if tr.State.Terminal() {
			out = append(out, client.Event{Type: client.EventState, State: string(tr.State), At: tr.At})
		}
	}
	inv := wire(rec)
	return append(out, client.Event{Type: client.EventResult, State: string(rec.State), At: rec.Finished(), Invocation: &inv})
}

// follow answers r with the event stream of one run, once found (an error
// is written as the request's answer instead): next gives the run's whole
// timeline as known now, whether it is complete, and up to two channels
// closed at its next change (nil: none). A comment line is sent every
// keepaliveEvery while nothing changes.
func (s *Server) follow(w http.ResponseWriter, r *http.Request, found error, next func() (timeline []client.Event, done bool, a, b <-chan struct{})) {
	if found != nil {
		s.writeError(w, found)
		return
	}
	es, ok := s.startEvents(w, r)
	if !ok {
		return
	}
	keepalive := time.NewTicker(keepaliveEvery)
	defer keepalive.Stop()
	for {
		timeline, done, a, b := next()
		es.send(timeline)
		if done {
			return
		}
		select {
		case <-a:
		case <-b:
		case <-keepalive.C:
			es.keepalive()
		case <-r.Context().Done():
			return
		case <-s.base.Done():
			return
		}
	}
}

// handleEvents is GET /v1/invocations/{id}/events: server-sent events of
// every state change, the output as it is produced, then the final record,
// then the stream ends (invocationTimeline).
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request, t *tenant) {
	id := r.PathValue("id")
	_, err := s.owned(id, t)
	if s.cluster != nil && sandbox.ClassOf(err) == NotFound {
		s.eventsRemote(w, r, t, id) // another node's, or nobody's
		return
	}
	s.follow(w, r, err, func() ([]client.Event, bool, <-chan struct{}, <-chan struct{}) {
		ch := s.note.wait(id)
		live, wake := s.liveOutput(id, 0)
		rec, err := s.store.Get(id)
		if err != nil { // purged meanwhile
			return nil, true, nil, nil
		}
		if rec.State.Terminal() {
			s.note.notify(id) // nothing else will close ch
		}
		return invocationTimeline(rec, live), rec.State.Terminal(), ch, wake
	})
}

// liveOutput is the output chunks of the invocation id this node runs,
// from index from, and a channel closed when there are more; none (and
// nil) once it no longer runs here.
func (s *Server) liveOutput(id string, from int) ([]sandbox.Chunk, <-chan struct{}) {
	s.mu.Lock()
	j := s.jobs[id]
	s.mu.Unlock()
	if j == nil {
		return nil, nil
	}
	chunks, _, more := j.out.Read(from)
	return chunks, more
}

// remotePoll is how long one read of another node's record waits for it to
// end: well inside keepaliveEvery, so an idle stream is never silent long.
const remotePoll = 5 * time.Second

// eventsRemote is GET .../events for an invocation another node of the
// cluster holds, followed on that node through the cluster (Cluster.Follow)
// for the same tenant only: its state changes as the record shows them,
// its output chunks as they are produced, then the final record — the
// same events under the same numbers as a reader on the holding node
// gets, since the live chunks are a prefix of the record's.
func (s *Server) eventsRemote(w http.ResponseWriter, r *http.Request, t *tenant, id string) {
	rec, live, err := s.cluster.Follow(r.Context(), t.cfg.Name, id, "", 0, 0)
	if errors.Is(err, store.ErrNotFound) {
		err = notFound(id, err)
	}
	first := true
	s.follow(w, r, err, func() ([]client.Event, bool, <-chan struct{}, <-chan struct{}) {
		if !first {
			next, more, err := s.cluster.Follow(r.Context(), t.cfg.Name, id, rec.State, len(live), remotePoll)
			if err != nil {
				// The holder is not answering now: ask again shortly.
				retry := make(chan struct{})
				time.AfterFunc(time.Second, func() { close(retry) })
				return nil, r.Context().Err() != nil, retry, nil
			}
			rec, live = next, append(live, more...)
		}
		first = false
		again := make(chan struct{})
		close(again) // the next read does the waiting
		return invocationTimeline(rec, live), rec.State.Terminal(), again, nil
	})
}

// Follow answers another node's event stream for a record this node holds
// (cluster.Executor): the record and its live chunks past the first have,
// once either differs from what the reader has (state, have) or wait
// runs out.
func (s *Server) Follow(ctx context.Context, tenant, id string, state store.State, have int, wait time.Duration) (store.Invocation, []sandbox.Chunk, error) {
	timer := time.NewTimer(min(wait, s.cfg.MaxWait.D()))
	defer timer.Stop()
	for {
		changed := s.note.wait(id)
		live, more := s.liveOutput(id, have)
		rec, err := s.store.Get(id)
		if err != nil {
			return rec, nil, err
		}
		if rec.Tenant != tenant {
			return store.Invocation{}, nil, store.ErrNotFound
		}
		if rec.State != state || len(live) > 0 || rec.State.Terminal() {
			return rec, live, nil
		}
		select {
		case <-changed:
		case <-more:
		case <-timer.C:
			return rec, nil, nil
		case <-ctx.Done():
			return rec, nil, ctx.Err()
		}
	}
}
