package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/wovyr/wovyr/client"
)

// chunk is the size of one output event.
const chunk = 16 << 10

// handleEvents is GET /v1/invocations/{id}/events: server-sent events of
// every state change, then the output in chunks, then the final record,
// then the stream ends.
//
// The events are derived from the durable record alone, so a stream opened
// late, after a restart, or resumed with Last-Event-ID sees the same
// sequence with the same ids. Backends deliver output when the workload
// ends (Sandbox.Run returns it whole), so output events follow the last
// state change.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request, t *tenant) {
	id := r.PathValue("id")
	if _, err := s.owned(id, t); err != nil {
		s.writeError(w, err)
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		s.writeError(w, fmt.Errorf("streaming unsupported"))
		return
	}
	last, _ := strconv.Atoi(r.Header.Get("Last-Event-ID"))
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fl.Flush()

	seq, sent := 0, 0
	emit := func(ev client.Event) {
		seq++
		ev.Seq = seq
		if seq <= last {
			return
		}
		b, _ := json.Marshal(ev)
		fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", seq, ev.Type, b)
	}
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		ch := s.note.wait(id)
		rec, err := s.store.Get(id)
		if err != nil { // purged meanwhile
			return
		}
		for ; sent < len(rec.Transitions); sent++ {
			tr := rec.Transitions[sent]
			emit(client.Event{Type: client.EventState, State: string(tr.State), At: tr.At})
		}
		if rec.State.Terminal() {
			s.note.notify(id)
			if res := rec.Result; res != nil {
				emitChunks(emit, client.EventStdout, res.Stdout)
				emitChunks(emit, client.EventStderr, res.Stderr)
			}
			inv := wire(rec)
			emit(client.Event{Type: client.EventResult, State: string(rec.State), At: rec.Finished(), Invocation: &inv})
			fl.Flush()
			return
		}
		fl.Flush()
		select {
		case <-ch:
		case <-keepalive.C:
			fmt.Fprint(w, ": keepalive\n\n")
		case <-r.Context().Done():
			return
		case <-s.base.Done():
			return
		}
	}
}

func emitChunks(emit func(client.Event), typ string, data []byte) {
	for len(data) > 0 {
		n := min(len(data), chunk)
		emit(client.Event{Type: typ, Data: data[:n]})
		data = data[n:]
	}
}
