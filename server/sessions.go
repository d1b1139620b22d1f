package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/session"
)

// expireEvery is how often idle and over-age sessions are ended.
const expireEvery = time.Second

// newSessions is the daemon's session manager: a tenant's live sessions
// are bounded by its max_sessions (429 beyond).
func newSessions(s *Server, log *slog.Logger) (*session.Manager, error) {
	quota := map[string]int{}
	for _, t := range s.tenants {
		quota[t.cfg.Name] = t.cfg.MaxSessions
	}
	return session.New(session.Config{Store: s.store, Logger: log, Admit: func(tenant string, live int) error {
		if q := quota[tenant]; live >= q {
			return sandbox.Errorf(RateLimited, "", "tenant %s has %d live sessions, its quota", tenant, q)
		}
		return nil
	}})
}

// sessionLoop ends expired sessions until ctx ends.
func (s *Server) sessionLoop(ctx context.Context) {
	t := time.NewTicker(expireEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.sessions.Expire(now)
		}
	}
}

// handleSessionCreate is POST /v1/sessions: validate (400, nothing
// recorded), Select among backends that hold sessions (409), check the
// image (400), admit like an invocation (429) and create; the session's
// sandbox comes from the pool of its backend and template once admission
// lets it start. The admission ticket ends with the creation: a live
// session holds a pool slot (MaxLive) and its tenant's max_sessions, not
// a scheduler slot.
func (s *Server) handleSessionCreate(w http.ResponseWriter, r *http.Request, t *tenant) {
	if ok, after := t.rate.take(time.Now()); !ok {
		s.writeError(w, retryAfter(sandbox.Errorf(RateLimited, "", "tenant %s is over its submission rate (%.4g/s)", t.cfg.Name, t.cfg.Rate), after))
		return
	}
	if s.closing.Load() {
		s.writeError(w, sandbox.Errorf(Unavailable, "", "the daemon is shutting down"))
		return
	}
	var req client.SessionRequest
	if err := s.decodeBody(w, r, &req, "session"); err != nil {
		s.writeError(w, err)
		return
	}
	sp := session.Spec{Image: req.Image, Limits: req.Limits, Policy: req.Policy, Resources: req.Resources,
		IdleTimeout: req.IdleTimeout, MaxLifetime: req.MaxLifetime}
	if err := sp.Validate(t.cfg.Name); err != nil {
		s.writeError(w, err)
		return
	}
	b, err := s.mgr.Select(r.Context(), req.Policy, sandbox.KindSession)
	if err != nil {
		s.writeError(w, err)
		return
	}
	if err := sandbox.CheckRunnable(b, &sandbox.Workload{Kind: sandbox.KindCommand, Image: req.Image}); err != nil {
		s.writeError(w, err)
		return
	}
	tk := Ticket{ID: "session-" + sandbox.NewID(), Tenant: t.cfg.Name, Weight: t.cfg.Weight, Backend: b.Name(), Resources: req.Resources}
	if err := s.adm.Admit(tk); err != nil {
		s.writeError(w, err)
		return
	}
	defer s.adm.Done(tk)
	v, err := s.sessions.Create(r.Context(), t.cfg.Name, b.Name(), sp, func(ctx context.Context, c *sandbox.Claim) (session.Held, error) {
		if err := s.adm.Acquire(ctx, tk); err != nil {
			return session.Held{}, sandbox.Wrap(sandbox.Killed, err, "session not started")
		}
		lease, err := s.acquire(ctx, b, c.Invocation())
		if err != nil {
			return session.Held{}, err
		}
		sb, err := lease.Hold()
		if err != nil {
			lease.Release()
			return session.Held{}, err
		}
		return session.Held{Sandbox: sb, Release: lease.Release}, nil
	})
	if err != nil {
		s.writeError(w, err)
		return
	}
	w.Header().Set("Location", "/v1/sessions/"+v.ID)
	writeJSON(w, http.StatusCreated, wireSession(v))
}

// handleSessionList is GET /v1/sessions: the tenant's own, oldest first.
func (s *Server) handleSessionList(w http.ResponseWriter, r *http.Request, t *tenant) {
	vs, err := s.sessions.List(t.cfg.Name)
	if err != nil {
		s.writeError(w, err)
		return
	}
	out := client.SessionList{Sessions: []client.Session{}}
	for _, v := range vs {
		out.Sessions = append(out.Sessions, wireSession(v))
	}
	writeJSON(w, http.StatusOK, out)
}

// handleSessionGet is GET /v1/sessions/{id}.
func (s *Server) handleSessionGet(w http.ResponseWriter, r *http.Request, t *tenant) {
	v, err := s.sessions.Get(t.cfg.Name, r.PathValue("id"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wireSession(v))
}

// handleSessionDelete is DELETE /v1/sessions/{id}: it ends the session
// (its sandbox destroyed) and returns the final record.
func (s *Server) handleSessionDelete(w http.ResponseWriter, r *http.Request, t *tenant) {
	v, err := s.sessions.Delete(t.cfg.Name, r.PathValue("id"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wireSession(v))
}

// handleExec is POST /v1/sessions/{id}/exec: one command, answered with
// its result when it ends.
func (s *Server) handleExec(w http.ResponseWriter, r *http.Request, t *tenant) {
	var e sandbox.Exec
	if err := s.decodeBody(w, r, &e, "exec"); err != nil {
		s.writeError(w, err)
		return
	}
	res, err := s.sessions.Exec(r.Context(), t.cfg.Name, r.PathValue("id"), &e)
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// fileOp runs op in the request's session and writes its error, if any.
func (s *Server) fileOp(w http.ResponseWriter, r *http.Request, t *tenant, op *sandbox.FileOp) (*sandbox.FileReply, bool) {
	fr, err := s.sessions.File(r.Context(), t.cfg.Name, r.PathValue("id"), op)
	if err != nil {
		s.writeError(w, err)
		return nil, false
	}
	return fr, true
}

// handleFileList is GET /v1/sessions/{id}/files[?path=DIR].
func (s *Server) handleFileList(w http.ResponseWriter, r *http.Request, t *tenant) {
	if fr, ok := s.fileOp(w, r, t, &sandbox.FileOp{Op: sandbox.FileList, Path: r.URL.Query().Get("path")}); ok {
		writeJSON(w, http.StatusOK, client.FileList{Entries: fr.Entries})
	}
}

// handleFileStat is GET /v1/sessions/{id}/files/stat?path=P.
func (s *Server) handleFileStat(w http.ResponseWriter, r *http.Request, t *tenant) {
	if fr, ok := s.fileOp(w, r, t, &sandbox.FileOp{Op: sandbox.FileStat, Path: r.URL.Query().Get("path")}); ok {
		writeJSON(w, http.StatusOK, fr.Entries[0])
	}
}

// handleDownload is GET /v1/sessions/{id}/files/content?path=P: the raw
// bytes of a regular file.
func (s *Server) handleDownload(w http.ResponseWriter, r *http.Request, t *tenant) {
	if fr, ok := s.fileOp(w, r, t, &sandbox.FileOp{Op: sandbox.FileRead, Path: r.URL.Query().Get("path")}); ok {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(fr.Data)))
		w.WriteHeader(http.StatusOK)
		w.Write(fr.Data)
	}
}

// handleUpload is PUT /v1/sessions/{id}/files/content?path=P[&mode=OCTAL]:
// the raw body becomes the file, bounded by the body cap and
// sandbox.MaxFileBytes (413 beyond, nothing written).
func (s *Server) handleUpload(w http.ResponseWriter, r *http.Request, t *tenant) {
	op := &sandbox.FileOp{Op: sandbox.FileWrite, Path: r.URL.Query().Get("path")}
	if m := r.URL.Query().Get("mode"); m != "" {
		mode, err := strconv.ParseUint(m, 8, 32)
		if err != nil {
			s.writeError(w, sandbox.Errorf(sandbox.BadInput, "mode", "mode must be octal permission bits such as 755"))
			return
		}
		op.Mode = uint32(mode)
	}
	limit := min(s.cfg.MaxBodyBytes, sandbox.MaxFileBytes)
	if r.ContentLength > limit {
		s.writeError(w, sandbox.Errorf(TooLarge, "", "the file is %d bytes; the limit is %d", r.ContentLength, limit))
		return
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var maxErr *http.MaxBytesError
	switch {
	case errors.As(err, &maxErr):
		s.writeError(w, sandbox.Errorf(TooLarge, "", "the file exceeds %d bytes", limit))
		return
	case err != nil:
		s.writeError(w, sandbox.Errorf(sandbox.BadInput, "", "read the body: %v", err))
		return
	}
	op.Data = data
	if _, ok := s.fileOp(w, r, t, op); ok {
		w.WriteHeader(http.StatusNoContent)
	}
}

// handleFileRemove is DELETE /v1/sessions/{id}/files/content?path=P.
func (s *Server) handleFileRemove(w http.ResponseWriter, r *http.Request, t *tenant) {
	if _, ok := s.fileOp(w, r, t, &sandbox.FileOp{Op: sandbox.FileRemove, Path: r.URL.Query().Get("path")}); ok {
		w.WriteHeader(http.StatusNoContent)
	}
}

// wireSession converts a session's view to its API form.
func wireSession(v session.View) client.Session {
	out := client.Session{ID: v.ID, Tenant: v.Tenant, Backend: v.Backend, State: string(v.State), Image: v.Claim.Image,
		Limits: v.Claim.Limits, Policy: v.Claim.Policy, IdleTimeout: v.IdleTimeout, MaxLifetime: v.MaxLifetime,
		Created: v.Created, LastActive: v.LastActive, Execs: v.Execs, EndReason: v.EndReason,
		Transitions: []client.SessionTransition{}}
	for _, tr := range v.Transitions {
		out.Transitions = append(out.Transitions, client.SessionTransition{State: string(tr.State), At: tr.At, Reason: tr.Reason})
	}
	return out
}
