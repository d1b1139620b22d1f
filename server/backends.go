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
		s.writeError(w, sandbox.Errorf(Forbidden, "probe", "re-probing needs an admin token"))
		return
	}
	sts := s.mgr.Detect(r.Context(), force)
	if !t.cfg.Admin {
		// A probe's reason names host paths and the operator's fix; a
		// tenant learns only whether each backend is usable here.
		for i := range sts {
			if !sts[i].Capability.Available {
				sts[i].Capability.Reason = sandbox.SummaryUnavailable
			}
			if sts[i].CertReason != "" {
				sts[i].CertReason = sandbox.SummaryUncertified
			}
		}
	}
	writeJSON(w, http.StatusOK, sts)
}

// handleCertify is POST /v1/backends/{name}/certify (admin): run the escape
// battery for one backend and store the record; the manager sees it at once.
func (s *Server) handleCertify(w http.ResponseWriter, r *http.Request, t *tenant) {
	name := r.PathValue("name")
	if _, ok := s.mgr.Backend(name); !ok {
		s.writeError(w, sandbox.Errorf(NotFound, "name", "no backend %q on this node", name))
		return
	}
	if s.certify == nil {
		s.writeError(w, sandbox.Errorf(Unavailable, "", "this daemon was started without the battery (no wovyr-guest)"))
		return
	}
	rec, err := s.certify(r.Context(), name)
	if err != nil {
		s.log.Warn("certify failed", "backend", name, "error", err.Error())
		writeErrorMessage(w, err, err.Error()) // admin only: the operator's full reason
		return
	}
	if err := s.store.PutCert(rec); err != nil {
		s.writeError(w, sandbox.Wrap(sandbox.BackendFailure, err, "store certification"))
		return
	}
	s.mgr.Detect(r.Context(), true)
	s.log.Info("certified", "backend", name, "passed", rec.Passed, "failed", rec.Failed())
	writeJSON(w, http.StatusOK, rec)
}
