package server

import (
	"net/http"

	"github.com/wovyr/wovyr/sandbox"
)

// handleBackends is GET /v1/backends[?probe=true]: every backend's probe and
// certification. Re-probing (probe=true) exercises the runtimes, so it is
// admin only.
func (s *Server) handleBackends(w http.ResponseWriter, r *http.Request, t *tenant) {
	force := r.URL.Query().Get("probe") == "true"
	if force && !t.cfg.Admin {
		writeError(w, sandbox.Errorf(Forbidden, "probe", "re-probing needs an admin token"))
		return
	}
	writeJSON(w, http.StatusOK, s.mgr.Detect(r.Context(), force))
}

// handleCertify is POST /v1/backends/{name}/certify (admin): run the escape
// battery for one backend and store the record; the manager sees it at once.
func (s *Server) handleCertify(w http.ResponseWriter, r *http.Request, t *tenant) {
	name := r.PathValue("name")
	if _, ok := s.mgr.Backend(name); !ok {
		writeError(w, sandbox.Errorf(NotFound, "name", "no backend %q on this node", name))
		return
	}
	if s.certify == nil {
		writeError(w, sandbox.Errorf(Unavailable, "", "this daemon was started without the battery (no wovyr-guest)"))
		return
	}
	rec, err := s.certify(r.Context(), name)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.store.PutCert(rec); err != nil {
		writeError(w, sandbox.Wrap(sandbox.BackendFailure, err, "store certification"))
		return
	}
	s.mgr.Detect(r.Context(), true)
	s.log.Info("certified", "backend", name, "passed", rec.Passed, "failed", rec.Failed())
	writeJSON(w, http.StatusOK, rec)
}
