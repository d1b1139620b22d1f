package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// handleSubmit is POST /v1/invocations[?wait=DURATION].
func (s *Server) handleSubmit(w http.ResponseWriter, r *http.Request, t *tenant) {
	received := time.Now()
	if ok, after := t.rate.take(time.Now()); !ok {
		s.writeError(w, retryAfter(sandbox.Errorf(RateLimited, "", "tenant %s is over its submission rate (%.4g/s)", t.cfg.Name, t.cfg.Rate), after))
		return
	}
	wait, err := s.waitParam(r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	inv, err := s.decodeInvocation(w, r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	switch {
	case inv.ID != "":
		err = sandbox.Errorf(sandbox.BadInput, "id", "the invocation id is assigned by the server")
	case inv.Tenant != "" && inv.Tenant != t.cfg.Name:
		err = sandbox.Errorf(sandbox.BadInput, "tenant", "the tenant is the token's (%s)", t.cfg.Name)
	}
	if err != nil {
		s.writeError(w, err)
		return
	}
	inv.ID, inv.Tenant = sandbox.NewID(), t.cfg.Name
	if err := inv.Validate(); err != nil {
		s.writeError(w, err)
		return
	}
	if s.cluster != nil {
		// A node cut off from its cluster takes no new work: it could
		// neither place it by live regions nor let the other nodes
		// answer for it. What runs goes on.
		if err := s.cluster.Reachable(); err != nil {
			s.writeError(w, retryAfter(err, 2*time.Second))
			return
		}
	}
	region, err := s.place(t, inv)
	if err != nil {
		s.writeError(w, err)
		return
	}
	if region != "" {
		s.dispatch(w, r, inv, region, wait)
		return
	}
	j, err := s.submit(r.Context(), t, inv, received, true)
	if err != nil {
		s.writeError(w, err)
		return
	}
	s.met.phase(j.backend.Name(), "accept", time.Since(received))
	if err := j.awaitRecord(r.Context()); err != nil {
		s.writeError(w, err)
		return
	}
	rec, err := s.waitDone(r.Context(), inv.ID, wait)
	if err != nil {
		s.writeError(w, sandbox.Wrap(sandbox.BackendFailure, err, "read record"))
		return
	}
	w.Header().Set("Location", "/v1/invocations/"+inv.ID)
	status := http.StatusAccepted
	if rec.State.Terminal() {
		status = http.StatusOK
		// From the terminal record's commit to the response written.
		if at := j.recorded.Load(); at != 0 {
			defer func() { s.met.phase(j.backend.Name(), "respond", time.Since(time.Unix(0, at))) }()
		}
	}
	writeJSON(w, status, wire(rec))
}

// handleGet is GET /v1/invocations/{id}[?wait=DURATION].
func (s *Server) handleGet(w http.ResponseWriter, r *http.Request, t *tenant) {
	wait, err := s.waitParam(r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	id := r.PathValue("id")
	if _, err := s.owned(id, t); err != nil {
		if s.cluster != nil && sandbox.ClassOf(err) == NotFound {
			s.getRemote(w, r, t, id, wait) // another node's, or nobody's
			return
		}
		s.writeError(w, err)
		return
	}
	rec, err := s.waitDone(r.Context(), id, wait)
	if err != nil {
		s.writeError(w, notFound(id, err))
		return
	}
	writeJSON(w, http.StatusOK, wire(rec))
}

// handleCancel is DELETE /v1/invocations/{id}: it cancels, waits for the
// invocation to be recorded as ended, and returns the record.
func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request, t *tenant) {
	id := r.PathValue("id")
	rec, err := s.Cancel(r.Context(), t.cfg.Name, id)
	if errors.Is(err, store.ErrNotFound) && s.cluster != nil {
		rec, err = s.cluster.Cancel(r.Context(), t.cfg.Name, id) // another node's, or nobody's
	}
	if errors.Is(err, store.ErrNotFound) {
		err = notFound(id, err)
	}
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wire(rec))
}

// Cancel cancels the tenant's invocation id on this node, waits for it to
// be recorded as ended and returns the record: a Conflict if it had
// already ended, store.ErrNotFound for one this node does not hold for
// that tenant (another tenant's as a missing one). It is also the
// cluster's cancel of a record this node holds (cluster.Executor).
func (s *Server) Cancel(ctx context.Context, tenant, id string) (store.Invocation, error) {
	rec, err := s.store.Get(id)
	if err == nil && rec.Tenant != tenant {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Invocation{}, err
	}
	if !rec.State.Terminal() && !s.cancel(id, errCancelled) {
		if rec, err = s.store.Get(id); err != nil { // it ended meanwhile
			return store.Invocation{}, err
		}
	}
	if rec.State.Terminal() {
		return store.Invocation{}, sandbox.Errorf(Conflict, "", "invocation %s already ended (%s)", id, rec.State)
	}
	return s.waitDone(ctx, id, time.Minute)
}

// owned returns the record id if tenant t owns it; another tenant's record
// is NotFound, exactly as a missing one, so ids do not leak.
func (s *Server) owned(id string, t *tenant) (store.Invocation, error) {
	rec, err := s.store.Get(id)
	if err != nil {
		return rec, notFound(id, err)
	}
	if rec.Tenant != t.cfg.Name {
		return store.Invocation{}, notFound(id, store.ErrNotFound)
	}
	return rec, nil
}

func notFound(id string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return sandbox.Errorf(NotFound, "id", "no invocation %s", id)
	}
	return sandbox.Wrap(sandbox.BackendFailure, err, "read record")
}

// waitParam parses ?wait=, capped at the configured maximum.
func (s *Server) waitParam(r *http.Request) (time.Duration, error) {
	v := r.URL.Query().Get("wait")
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, sandbox.Errorf(sandbox.BadInput, "wait", "wait must be a duration such as 30s")
	}
	return min(d, s.cfg.MaxWait.D()), nil
}

// decodeInvocation reads the body strictly (decodeBody).
func (s *Server) decodeInvocation(w http.ResponseWriter, r *http.Request) (*sandbox.Invocation, error) {
	var inv sandbox.Invocation
	if err := s.decodeBody(w, r, &inv, "invocation"); err != nil {
		return nil, err
	}
	return &inv, nil
}

// decodeBody reads the body into v (a what) strictly: bounded (413),
// well-formed JSON (400), no unknown fields (400 naming the field), one
// object only.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any, what string) error {
	limit := s.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		return sandbox.Errorf(TooLarge, "", "the body is %d bytes; the limit is %d", r.ContentLength, limit)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if dec.Decode(&struct{}{}) != io.EOF {
			return sandbox.Errorf(sandbox.BadInput, "", "the body must hold one JSON object and nothing after it")
		}
		return nil
	}
	var (
		maxErr    *http.MaxBytesError
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
		typed     *sandbox.Error
	)
	switch {
	case errors.As(err, &maxErr):
		return sandbox.Errorf(TooLarge, "", "the body exceeds %d bytes", limit)
	case errors.Is(err, io.EOF):
		return sandbox.Errorf(sandbox.BadInput, "", "the body is empty; want a JSON %s", what)
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF):
		return sandbox.Errorf(sandbox.BadInput, "", "malformed JSON: %v", err)
	case errors.As(err, &typeErr):
		return sandbox.Errorf(sandbox.BadInput, typeErr.Field, "%s must be a JSON %s", typeErr.Field, typeErr.Type)
	case errors.As(err, &typed):
		return err
	}
	// encoding/json reports unknown fields only as text.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name, _ = strconv.Unquote(name)
		return sandbox.Errorf(sandbox.BadInput, name, "unknown field %q", name)
	}
	// The decoder's message is about the body alone: safe to show whole.
	return sandbox.Errorf(sandbox.BadInput, "", "invalid %s: %v", what, err)
}

// wire converts a store record to its API form.
func wire(rec store.Invocation) client.Invocation {
	out := client.Invocation{ID: rec.ID, Tenant: rec.Tenant, SpecDigest: rec.SpecDigest, Backend: rec.Backend,
		State: string(rec.State), Result: rec.Result, Created: rec.Created, Transitions: []client.Transition{},
		Region: rec.Region, Zone: rec.Zone, Node: rec.Node}
	for _, t := range rec.Transitions {
		out.Transitions = append(out.Transitions, client.Transition{State: string(t.State), At: t.At})
	}
	return out
}
