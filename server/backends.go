package server

import (
	"net/http"
	"time"

	"github.com/wovyr/wovyr/manager"
	"github.com/wovyr/wovyr/sandbox"
)

// BackendStatus is one entry of GET /v1/backends: the manager's status of
// a backend and the state of its pools.
type BackendStatus struct {
	manager.Status
	Pools []PoolStatus `json:"pools,omitempty"`
}

// PoolStatus is one pool's refill state. A stalled pool (State
// pool.StateStalled) has a template that cannot be prepared: Class and
// Field type the reason, Reason says it, and it tries again at RetryAt,
// when its template's check passes, or when the backend is re-certified
// or re-probed.
type PoolStatus struct {
	Key      string     `json:"key,omitempty"` // admin only: the pool's whole key, its resource shape included
	Template string     `json:"template"`
	State    string     `json:"state"`
	Class    string     `json:"class,omitempty"`
	Field    string     `json:"field,omitempty"`
	Reason   string     `json:"reason,omitempty"`
	Since    *time.Time `json:"since,omitempty"`
	RetryAt  *time.Time `json:"retry_at,omitempty"`
}

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
	if force {
		s.pools.Resume("") // the operator says something changed
	}
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
	writeJSON(w, http.StatusOK, s.withPools(sts, t.cfg.Admin))
}

// withPools adds each backend's pools to its status. Only an admin reads a
// stall's full reason (it may name the command that fixes it); a tenant
// reads its public form.
func (s *Server) withPools(sts []manager.Status, admin bool) []BackendStatus {
	out := make([]BackendStatus, len(sts))
	idx := make(map[string]int, len(sts))
	for i, st := range sts {
		out[i].Status = st
		idx[st.Name] = i
	}
	for _, sn := range s.pools.Snapshots() {
		i, ok := idx[sn.Key.Backend]
		if !ok {
			continue
		}
		ps := PoolStatus{Template: sn.Key.Template, State: sn.State()}
		if admin {
			ps.Key = sn.Key.String()
		}
		if st := sn.Stall; st != nil {
			since, retry := st.Since, st.RetryAt
			ps.Class, ps.Field, ps.Since = string(st.Class()), st.Field(), &since
			ps.Reason = sandbox.Public(st.Err)
			if admin {
				ps.Reason = st.Err.Error()
			}
			if !st.RetryAt.IsZero() {
				ps.RetryAt = &retry
			}
		}
		out[i].Pools = append(out[i].Pools, ps)
	}
	return out
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
	s.pools.Resume(name)
	s.log.Info("certified", "backend", name, "passed", rec.Passed, "failed", rec.Failed())
	writeJSON(w, http.StatusOK, rec)
}
