package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/manager"
	"github.com/wovyr/wovyr/pool"
	"github.com/wovyr/wovyr/resource"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/session"
	"github.com/wovyr/wovyr/store"
)

// expireEvery is how often idle and over-age sessions are ended.
const expireEvery = time.Second

// newSessions is the daemon's session manager: a tenant's live sessions,
// paused ones included, are bounded by its max_sessions (429 beyond); with
// dir, idle sessions pause there and resume through reacquireSession.
func newSessions(s *Server, dir string, log *slog.Logger) (*session.Manager, error) {
	quota := map[string]int{}
	for _, t := range s.tenants {
		quota[t.cfg.Name] = t.cfg.MaxSessions
	}
	cfg := session.Config{Store: s.store, Logger: log, Admit: func(tenant string, live int) error {
		if q := quota[tenant]; live >= q {
			return sandbox.Errorf(RateLimited, "", "tenant %s has %d live sessions, its quota", tenant, q)
		}
		return nil
	}}
	if dir != "" {
		cfg.Dir, cfg.Reacquire, cfg.Discard = dir, s.reacquireSession, s.mgr.Discard
	}
	return session.New(cfg)
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
			s.sessions.PauseUnfit(ctx, s.sessionFit)
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
	if err := s.placeHere(t, req.Policy.Residency); err != nil {
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
	tk := s.sessionTicket(t, b, req.Resources)
	if err := s.adm.Admit(tk); err != nil {
		s.writeError(w, err)
		return
	}
	defer s.adm.Done(tk)
	v, err := s.sessions.Create(r.Context(), t.cfg.Name, b.Name(), sp, func(ctx context.Context, c *sandbox.Claim) (session.Held, error) {
		return s.leaseSession(ctx, tk, b, c, nil, "session not started")
	})
	if err != nil {
		s.writeError(w, err)
		return
	}
	w.Header().Set("Location", "/v1/sessions/"+v.ID)
	writeJSON(w, http.StatusCreated, wireSession(v))
}

func (s *Server) sessionTicket(t *tenant, b sandbox.Backend, res resource.Vector) Ticket {
	return Ticket{ID: "session-" + sandbox.NewID(), Tenant: t.cfg.Name, Weight: t.cfg.Weight, Backend: b.Name(), Resources: res}
}

// leaseSession waits for tk's turn (admitted), then leases and holds a
// sandbox of b from its pool for claim c: a fresh one, or where from is
// set the session's saved sandbox, restored through the manager into a
// slot of that same pool.
func (s *Server) leaseSession(ctx context.Context, tk Ticket, b sandbox.Backend, c *sandbox.Claim, from *sandbox.Paused, what string) (session.Held, error) {
	if err := s.adm.Acquire(ctx, tk); err != nil {
		return session.Held{}, sandbox.Wrap(sandbox.Killed, err, "%s", what)
	}
	var lease *pool.Lease
	p, err := s.poolFor(b, manager.TemplateFor(c.Invocation()))
	if err == nil && from == nil {
		lease, err = p.Acquire(ctx)
	} else if err == nil {
		lease, err = p.AcquireFrom(ctx, func(ctx context.Context) (sandbox.Sandbox, error) {
			return s.mgr.Resume(ctx, b, c.Policy, sandbox.KindSession, *from, c.Tenant)
		})
	}
	if err != nil {
		return session.Held{}, err
	}
	sb, err := lease.Hold()
	if err != nil {
		lease.Release()
		return session.Held{}, err
	}
	return session.Held{Sandbox: sb, Release: lease.Release}, nil
}

// reacquireSession is session.Config.Reacquire: a resuming session's new
// sandbox, on the backend it was created on and nowhere else. While that
// backend may not hold the session's policy — uncertified, unavailable,
// below the floor the policy now requires — the resume is refused with the
// same floor-unmet error a creation would get, and the session stays
// paused. Then it is admitted and leased as a creation is.
func (s *Server) reacquireSession(ctx context.Context, tenantName, backend string, c *sandbox.Claim, from *sandbox.Paused) (session.Held, error) {
	t := s.tenantNamed(tenantName)
	b, ok := s.mgr.Backend(backend)
	if t == nil || !ok {
		return session.Held{}, sandbox.Errorf(sandbox.Conflict, "", "session %s cannot resume: its tenant or its backend %s is gone from this daemon", c.ID, backend)
	}
	if err := s.mgr.Holds(ctx, b, c.Policy, sandbox.KindSession); err != nil {
		return session.Held{}, err
	}
	tk := s.sessionTicket(t, b, c.Resources)
	if err := s.adm.Admit(tk); err != nil {
		return session.Held{}, err
	}
	defer s.adm.Done(tk)
	return s.leaseSession(ctx, tk, b, c, from, "session not resumed")
}

// sessionFit is PauseUnfit's question: may backend still hold a session
// claimed as c?
func (s *Server) sessionFit(backend string, c *sandbox.Claim) error {
	b, ok := s.mgr.Backend(backend)
	if !ok {
		return fmt.Errorf("no backend %s on this daemon", backend)
	}
	return s.mgr.Holds(s.base, b, c.Policy, sandbox.KindSession)
}

// handleSessionPause is POST /v1/sessions/{id}/pause: the session paused
// now (its workspace kept, its sandbox given back), waiting for the
// operation in flight; a paused one as it is. 200 with the record.
func (s *Server) handleSessionPause(w http.ResponseWriter, r *http.Request, t *tenant) {
	v, err := s.sessions.Pause(r.Context(), t.cfg.Name, r.PathValue("id"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wireSession(v))
}

// handleSessionResume is POST /v1/sessions/{id}/resume: a paused session
// resumed now (any exec or file request would resume it too); a running
// one as it is. 200 with the record.
func (s *Server) handleSessionResume(w http.ResponseWriter, r *http.Request, t *tenant) {
	v, err := s.sessions.Resume(r.Context(), t.cfg.Name, r.PathValue("id"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wireSession(v))
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
// its result when it ends (200), or with ?wait=0 as soon as it has started
// (202, its record; follow GET .../exec/{eid}/events). Any other wait is
// bad input. A background exec ("background": true) is always answered
// at once (202, its record with its pid; see processes.go).
func (s *Server) handleExec(w http.ResponseWriter, r *http.Request, t *tenant) {
	async := false
	if q := r.URL.Query(); q.Has("wait") {
		if q.Get("wait") != "0" {
			s.writeError(w, sandbox.Errorf(sandbox.BadInput, "wait", "wait must be 0 (start, answer at once) or absent (answer with the result)"))
			return
		}
		async = true
	}
	var e sandbox.Exec
	if err := s.decodeBody(w, r, &e, "exec"); err != nil {
		s.writeError(w, err)
		return
	}
	if async || e.Background {
		rec, err := s.sessions.Start(r.Context(), t.cfg.Name, r.PathValue("id"), &e)
		if err != nil {
			s.writeError(w, err)
			return
		}
		w.Header().Set("Location", "/v1/sessions/"+rec.Session+"/exec/"+rec.ID)
		writeJSON(w, http.StatusAccepted, wireExec(rec))
		return
	}
	res, err := s.sessions.Exec(r.Context(), t.cfg.Name, r.PathValue("id"), &e)
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// handleExecGet is GET /v1/sessions/{id}/exec/{eid}: the exec's record,
// running or ended.
func (s *Server) handleExecGet(w http.ResponseWriter, r *http.Request, t *tenant) {
	rec, err := s.sessions.GetExec(t.cfg.Name, r.PathValue("id"), r.PathValue("eid"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wireExec(rec))
}

// execTimeline is an exec's events: its output chunks (live while it runs,
// the record's once it has ended), then the exit event with the final
// record.
func execTimeline(rec store.Exec, live []sandbox.Chunk) []client.Event {
	if !rec.State.Terminal() {
		return chunkEvents(nil, live)
	}
	out := chunkEvents(nil, sandbox.Replay(rec.Chunks, rec.Result))
	ex := wireExec(rec)
	return append(out, client.Event{Type: client.EventExit, State: string(rec.State), At: rec.Ended, Exec: &ex})
}

// handleExecEvents is GET /v1/sessions/{id}/exec/{eid}/events: the exec's
// output as server-sent events while it runs, then its exit; the same
// sequence however late or often it is read (eventStream).
func (s *Server) handleExecEvents(w http.ResponseWriter, r *http.Request, t *tenant) {
	id, eid := r.PathValue("id"), r.PathValue("eid")
	_, err := s.sessions.Watch(t.cfg.Name, id, eid)
	s.follow(w, r, err, func() ([]client.Event, bool, <-chan struct{}, <-chan struct{}) {
		wt, err := s.sessions.Watch(t.cfg.Name, id, eid)
		switch {
		case err != nil: // purged meanwhile
			return nil, true, nil, nil
		case wt.Live == nil:
			return execTimeline(wt.Record, nil), true, nil, nil
		}
		live, _, wake := wt.Live.Read(0)
		return execTimeline(wt.Record, live), false, wake, nil
	})
}

// wireExec converts an exec's record to its API form.
func wireExec(rec store.Exec) client.Exec {
	return client.Exec{ID: rec.ID, Session: rec.Session, Argv: rec.Argv, Dir: rec.Dir, Background: rec.Background, OpenStdin: rec.OpenStdin, Pid: rec.Pid, State: string(rec.State),
		Started: rec.Started, Ended: rec.Ended, Result: rec.Result}
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
	s.serveFileData(w, r, t, &sandbox.FileOp{Op: sandbox.FileRead, Path: r.URL.Query().Get("path")}, "application/octet-stream")
}

// serveFileData answers with the data of op (a read or an archive) as
// ctype, or with its error.
func (s *Server) serveFileData(w http.ResponseWriter, r *http.Request, t *tenant, op *sandbox.FileOp, ctype string) {
	if fr, ok := s.fileOp(w, r, t, op); ok {
		w.Header().Set("Content-Type", ctype)
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
	data, err := s.readUpload(w, r, sandbox.MaxFileBytes)
	if err != nil {
		s.writeError(w, err)
		return
	}
	op.Data = data
	if _, ok := s.fileOp(w, r, t, op); ok {
		w.WriteHeader(http.StatusNoContent)
	}
}

// readUpload reads an upload's raw body, bounded by the body cap and max:
// TooLarge (413) beyond, before anything is done.
func (s *Server) readUpload(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	limit := min(s.cfg.MaxBodyBytes, max)
	if r.ContentLength > limit {
		return nil, sandbox.Errorf(TooLarge, "", "the upload is %d bytes; the limit is %d", r.ContentLength, limit)
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var maxErr *http.MaxBytesError
	switch {
	case errors.As(err, &maxErr):
		return nil, sandbox.Errorf(TooLarge, "", "the upload exceeds %d bytes", limit)
	case err != nil:
		return nil, sandbox.Errorf(sandbox.BadInput, "", "read the body: %v", err)
	}
	return data, nil
}

// handleArchiveGet is GET /v1/sessions/{id}/files/archive[?path=DIR]: the
// directory (the workspace by default) as a tar archive of its files,
// directories and symlinks, at most sandbox.MaxFileBytes (a larger tree is
// bad input, not a cut archive).
func (s *Server) handleArchiveGet(w http.ResponseWriter, r *http.Request, t *tenant) {
	s.serveFileData(w, r, t, &sandbox.FileOp{Op: sandbox.FileArchive, Path: r.URL.Query().Get("path")}, "application/x-tar")
}

// handleArchivePut is PUT /v1/sessions/{id}/files/archive[?path=DIR]: the
// tar archive in the body extracted into the directory (made if missing).
// An archive with an entry that cannot be extracted in place (a path out,
// a hard link, a device, an entry under a symlink) is refused whole,
// nothing written.
func (s *Server) handleArchivePut(w http.ResponseWriter, r *http.Request, t *tenant) {
	data, err := s.readUpload(w, r, sandbox.MaxFileBytes)
	if err != nil {
		s.writeError(w, err)
		return
	}
	if _, ok := s.fileOp(w, r, t, &sandbox.FileOp{Op: sandbox.FileExtract, Path: r.URL.Query().Get("path"), Data: data}); ok {
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
		Created: v.Created, LastActive: v.LastActive, Execs: v.Execs, EndReason: v.EndReason, Resume: v.Resume, PausedBytes: v.PausedBytes,
		Transitions: []client.SessionTransition{}}
	for _, tr := range v.Transitions {
		out.Transitions = append(out.Transitions, client.SessionTransition{State: string(tr.State), At: tr.At, Reason: tr.Reason})
	}
	return out
}
