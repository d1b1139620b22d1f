package server

import (
	"net/http"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
)

// A session's background processes: started by POST .../exec with
// "background": true (handleExec), read and killed here. Each goes
// through the session's turn, so it waits for a foreground exec in flight.

// handleProcessList is GET /v1/sessions/{id}/processes: the background
// execs the session holds (running, or ended and not yet killed), oldest
// first; a running one's record carries no output.
func (s *Server) handleProcessList(w http.ResponseWriter, r *http.Request, t *tenant) {
	recs, err := s.sessions.Processes(r.Context(), t.cfg.Name, r.PathValue("id"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	out := client.ProcessList{Processes: []client.Exec{}}
	for _, rec := range recs {
		out.Processes = append(out.Processes, wireExec(rec))
	}
	writeJSON(w, http.StatusOK, out)
}

// handleProcessGet is GET /v1/sessions/{id}/processes/{eid}: one
// background exec, with its output so far while it runs; its final record
// once killed.
func (s *Server) handleProcessGet(w http.ResponseWriter, r *http.Request, t *tenant) {
	rec, err := s.sessions.Process(r.Context(), t.cfg.Name, r.PathValue("id"), r.PathValue("eid"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wireExec(rec))
}

// handleProcessKill is DELETE /v1/sessions/{id}/processes/{eid}: SIGKILL to
// every process of the background exec's session inside the sandbox, and
// its final record (200); 404 for one the session does not hold.
func (s *Server) handleProcessKill(w http.ResponseWriter, r *http.Request, t *tenant) {
	rec, err := s.sessions.Kill(r.Context(), t.cfg.Name, r.PathValue("id"), r.PathValue("eid"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wireExec(rec))
}

// handleProcessStdin is POST /v1/sessions/{id}/processes/{eid}/stdin[?close=true]:
// the body (at most sandbox.MaxStdinWrite bytes) written to the stdin of
// a background exec started with "open_stdin": true, as far as its pipe
// takes it now — the write never waits for the process to read — then
// its stdin closed if asked and all of it was written. 200 with how much
// was written; 409 for a stdin that is closed, 404 for an exec the
// session does not hold.
func (s *Server) handleProcessStdin(w http.ResponseWriter, r *http.Request, t *tenant) {
	end, err := boolQuery(r, "close")
	if err != nil {
		s.writeError(w, err)
		return
	}
	data, err := s.readUpload(w, r, sandbox.MaxStdinWrite)
	if err != nil {
		s.writeError(w, err)
		return
	}
	n, err := s.sessions.WriteStdin(r.Context(), t.cfg.Name, r.PathValue("id"), r.PathValue("eid"), data, end)
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, client.StdinWrite{Written: n, Closed: end && n == len(data)})
}

// boolQuery reads the query parameter name as a boolean: absent is false.
func boolQuery(r *http.Request, name string) (bool, error) {
	switch v := r.URL.Query().Get(name); v {
	case "", "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	default:
		return false, sandbox.Errorf(sandbox.BadInput, name, "%s=%q: want true or false", name, v)
	}
}
