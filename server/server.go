// Package server is wovyr's daemon: the versioned HTTP API (/v1) over the
// manager and the durable store, with tenants and bearer tokens, server-sent
// events, Prometheus metrics, and a lifecycle that loses nothing.
//
// One invocation goes: authenticate → rate guard → validate (400, nothing
// started) → manager.Select (409 if no backend qualifies) → Admission.Admit
// (429) → store.Begin (queued) → Admission.Acquire → store.Start (running) →
// Prepare, Run, Destroy → store.Transition (done or failed). Every accepted
// id ends done, failed or — if the daemon dies — lost, which start-up
// records (Run) before it serves anything. The queued record (with the
// start, when admission starts it at once) commits beside the claim and the
// run, not before them (ADR 0044); no answer shows the id before it is
// durable, and the terminal record always commits after it.
//
// Sessions (/v1/sessions, sessions.go) take the same first steps —
// authenticate, rate guard, validate, Select (kind session), admission —
// then package session holds them: a sandbox leased from the same pools,
// many execs and file operations, ended on delete, idle timeout or
// lifetime, and recorded interrupted when the daemon stops or restarts.
//
// What it refuses to do: re-run an invocation that was running when the
// daemon died (the caller decides; it reads lost/daemon-restart), let a
// tenant see another's invocations or sessions (404, not 403, so ids do
// not leak), or map errors to statuses anywhere but statusOf.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/manager"
	"github.com/wovyr/wovyr/mcp"
	"github.com/wovyr/wovyr/plugin"
	"github.com/wovyr/wovyr/pool"
	"github.com/wovyr/wovyr/residency"
	"github.com/wovyr/wovyr/session"
	"github.com/wovyr/wovyr/store"
)

// Reconciler removes what a crashed daemon left on the host.
type Reconciler struct {
	Name string
	Fn   func(ctx context.Context) error
}

// Options are what New needs. Config is copied; the rest is shared.
type Options struct {
	Config  config.Config
	Manager *manager.Manager
	// Store is held open by the daemon; it must also be the Manager's
	// Certs so that certifications made through the API take effect.
	Store *store.Store
	// Admission decides admission and order. Nil means NewLimiter(Config).
	Admission Admission
	// Reconcilers run at start-up, in order, before every registered
	// backend that implements Reconcile(ctx) error or Reconcile(ctx) (int,
	// error) (processes first, then the mounts they held).
	Reconcilers []Reconciler
	// Certify runs the escape battery for one backend. Nil means
	// certification through the API is unavailable (503).
	Certify func(ctx context.Context, backend string) (cert.Record, error)
	// Logger receives JSON-able structured logs. Nil means slog.Default().
	Logger *slog.Logger
	// Version is the daemon's version, as /mcp reports it. Zero means "dev".
	Version string
	// Cluster is the node's cluster (package cluster). Nil means a node
	// alone: invocations are placed only on it, and residency that allows
	// only other regions is refused.
	Cluster Cluster
	// Plugins hosts component plugins (/v1/plugins). Nil means the daemon
	// hosts none (503). The caller closes it after Run returns.
	Plugins *plugin.Host
	// SessionDir keeps the workspaces of paused sessions (package
	// session). Empty means sessions never pause: an idle one ends.
	SessionDir string
}

// Server is the daemon. Create it with New and start it with Run.
type Server struct {
	cfg      config.Config
	mgr      *manager.Manager
	store    *store.Store
	adm      Admission
	pools    *pool.Group
	recs     []Reconciler
	certify  func(context.Context, string) (cert.Record, error)
	log      *slog.Logger
	met      *metrics
	tenants  []*tenant
	note     notifier
	sessions *session.Manager
	tools    *mcp.Tools
	recent   recentRuns // the dashboard's last finished invocations
	started  time.Time
	res      *residency.Policy // compiled once, here, from the config
	where    store.Where       // this node's region, zone and name
	cluster  Cluster
	plugins  *plugin.Host

	// base bounds every invocation; it is cancelled only after shutdown
	// has killed and recorded them.
	base     context.Context
	stopBase context.CancelFunc
	ready    atomic.Bool
	warm     []warmTarget // the default pools start-up fills (set before serving)
	closing  atomic.Bool
	wg       sync.WaitGroup // invocation goroutines

	mu   sync.Mutex
	jobs map[string]*job
}

// New builds a server from opts. It starts nothing.
func New(opts Options) (*Server, error) {
	cfg, err := opts.Config.WithDefaults()
	if err != nil {
		return nil, err
	}
	res, err := newResidency(cfg)
	if err != nil {
		return nil, err
	}
	if opts.Manager == nil || opts.Store == nil {
		return nil, errors.New("server: a manager and a store are required")
	}
	s := &Server{cfg: cfg, mgr: opts.Manager, store: opts.Store, adm: opts.Admission, certify: opts.Certify,
		log: opts.Logger, jobs: map[string]*job{}, started: time.Now(), res: res, plugins: opts.Plugins}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.adm == nil {
		s.adm = NewLimiter(cfg)
	}
	for _, t := range cfg.Tenants {
		s.tenants = append(s.tenants, &tenant{cfg: t, rate: newBucket(t.Rate, t.Burst)})
	}
	s.where, s.cluster = store.Where{Region: cfg.Region, Zone: cfg.Zone, Node: cfg.Node}, opts.Cluster
	s.recs = append(s.recs, opts.Reconcilers...)
	for _, b := range s.mgr.Backends() {
		switch r := b.(type) {
		case interface{ Reconcile(context.Context) error }:
			s.recs = append(s.recs, Reconciler{Name: "backend " + b.Name(), Fn: r.Reconcile})
		case interface {
			Reconcile(context.Context) (int, error)
		}:
			s.recs = append(s.recs, Reconciler{Name: "backend " + b.Name(), Fn: func(ctx context.Context) error {
				_, err := r.Reconcile(ctx)
				return err
			}})
		}
	}
	if s.pools, err = newPools(cfg, s); err != nil {
		return nil, err
	}
	if s.sessions, err = newSessions(s, opts.SessionDir, s.log); err != nil {
		return nil, err
	}
	if s.tools, err = mcp.New(mcp.Options{MCP: cfg.MCP, Version: opts.Version, Logger: s.log}); err != nil {
		return nil, err
	}
	s.met = newMetrics(s.adm.Queued)
	s.met.reg.MustRegister(newPoolCollector(s.pools))
	if f, ok := s.adm.(*Fair); ok {
		s.met.reg.MustRegister(newTenantCollector(f.Stats))
		s.met.reg.MustRegister(f.gpuCollectors()...)
	}
	s.base, s.stopBase = context.WithCancel(context.Background())
	return s, nil
}

// Recover is start-up after a crash: every invocation the store holds as
// queued or running is marked lost with reason daemon-restart (never re-run),
// then the reconcilers remove their leftovers. Run calls it first.
func (s *Server) Recover(ctx context.Context) error {
	ids, err := s.store.MarkLost("daemon-restart", time.Now())
	if err != nil {
		return fmt.Errorf("server: mark lost: %w", err)
	}
	for _, id := range ids {
		rec, _ := s.store.Get(id)
		s.met.invocations.WithLabelValues(rec.Backend, "lost", string(store.Lost)).Inc()
		s.log.Warn("invocation lost", "id", id, "tenant", rec.Tenant, "backend", rec.Backend, "reason", "daemon-restart")
	}
	var errs []error
	if _, err := s.sessions.Recover(time.Now()); err != nil {
		s.log.Error("recover sessions", "error", err)
		errs = append(errs, fmt.Errorf("sessions: %w", err))
	} else if err := s.mgr.ReconcilePaused(ctx, s.sessions.SavedSandboxes()); err != nil {
		// Only after a whole recovery: a saved sandbox is a paused
		// session's state until its record says otherwise.
		s.log.Error("reconcile paused sandboxes", "error", err)
		errs = append(errs, fmt.Errorf("paused sandboxes: %w", err))
	}
	s.restorePlugins()
	for _, r := range s.recs {
		if err := r.Fn(ctx); err != nil {
			s.log.Error("reconcile", "reconciler", r.Name, "error", err)
			errs = append(errs, fmt.Errorf("%s: %w", r.Name, err))
		}
	}
	s.log.Info("recovered", "lost", len(ids), "reconcilers", len(s.recs))
	return errors.Join(errs...)
}

// Run recovers, then serves on ln until ctx ends, then shuts down
// gracefully: it stops accepting, gives running invocations the configured
// grace, kills and records what is left, and returns. A reconcile failure is
// logged, not fatal: the lost records are already written.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	if err := s.Recover(ctx); err != nil {
		s.log.Error("recover incomplete", "error", err)
	}
	// Probe every backend before ready: the manager caches probes, and a
	// burst of first submissions would otherwise each probe at once. With
	// a probe cache (manager.Config.Probes) a restart adopts the answers
	// it stored while nothing they depend on changed (ADR 0013).
	sts := s.mgr.Detect(ctx, false)
	for _, st := range sts {
		s.log.Info("backend", "name", st.Name, "available", st.Capability.Available, "reason", st.Capability.Reason,
			"certified", st.Certified, "cert_reason", st.CertReason, "probed_at", st.ProbedAt, "cached", st.Cached)
	}
	s.warm = s.prewarm(sts)
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	purgeDone, poolsDone, sessionsDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() { defer close(purgeDone); s.purgeLoop(s.base) }()
	go func() { defer close(poolsDone); s.poolLoop(s.base) }()
	go func() { defer close(sessionsDone); s.sessionLoop(s.base) }()
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	// Ready once the default pools hold their minimum, so that the first
	// request of a fresh daemon is a warm claim; /readyz says what is
	// still warming meanwhile.
	s.awaitWarm(ctx, s.warm)
	s.ready.Store(true)
	clusterCtx, stopCluster := context.WithCancel(ctx)
	clusterDone := make(chan struct{})
	go func() {
		defer close(clusterDone)
		if s.cluster == nil {
			return
		}
		if err := s.cluster.Serve(clusterCtx, s); err != nil {
			s.log.Error("cluster", "error", err)
		}
	}()
	s.log.Info("serving", "addr", ln.Addr().String(), "tenants", len(s.tenants), "concurrency", s.cfg.Concurrency)

	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	// Out of the cluster first: no more dispatched work comes in while
	// what runs finishes.
	stopCluster()
	<-clusterDone
	s.shutdown(hs)
	<-purgeDone
	<-poolsDone
	<-sessionsDone
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// shutdown: refuse new work, close the listener, let running invocations
// finish within the grace, kill and record the rest, then end every open
// stream.
func (s *Server) shutdown(hs *http.Server) {
	s.ready.Store(false)
	s.closing.Store(true)
	httpDone := make(chan struct{})
	go func() {
		defer close(httpDone)
		_ = hs.Shutdown(context.Background())
	}()
	s.cancelJobs(false) // queued ones never start
	// Sessions end now: their operations are cancelled, their sandboxes
	// destroyed (before the pools close) and their records interrupted.
	s.sessions.Close()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	grace := time.NewTimer(s.cfg.ShutdownGrace.D())
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
		s.log.Warn("shutdown grace over: killing running invocations", "grace", s.cfg.ShutdownGrace.D())
		s.cancelJobs(true)
		<-done
	}
	s.stopBase() // ends long polls and streams that are still open
	select {
	case <-httpDone:
	case <-time.After(5 * time.Second):
		hs.Close()
	}
	s.log.Info("stopped")
}

func (s *Server) purgeLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.PurgeEvery.D())
	defer t.Stop()
	for {
		s.purge()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) purge() {
	n, err := s.store.PurgeFinished(time.Now().Add(-s.cfg.Retention.D()))
	if err != nil {
		s.log.Error("purge", "error", err)
	} else if n > 0 {
		s.log.Info("purged", "records", n, "retention", s.cfg.Retention.D())
	}
	if _, err := s.store.PurgeExecs(time.Now().Add(-s.cfg.Retention.D())); err != nil {
		s.log.Error("purge execs", "error", err)
	}
	if n, err := s.store.PurgeSessions(time.Now().Add(-s.cfg.Retention.D())); err != nil {
		s.log.Error("purge sessions", "error", err)
	} else if n > 0 {
		s.log.Info("purged", "sessions", n, "retention", s.cfg.Retention.D())
	}
}

// Handler is the API's routing; every route but /healthz and /readyz
// requires a bearer token. /mcp serves the MCP tools over this same
// routing (mcp.go).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	route := func(pattern string, h http.HandlerFunc) {
		mux.Handle(pattern, s.counted(pattern, h))
	}
	route("POST /v1/invocations", s.authed(false, s.handleSubmit))
	route("GET /v1/invocations/{id}", s.authed(false, s.handleGet))
	route("DELETE /v1/invocations/{id}", s.authed(false, s.handleCancel))
	route("GET /v1/invocations/{id}/events", s.authed(false, s.handleEvents))
	route("POST /v1/sessions", s.authed(false, s.handleSessionCreate))
	route("GET /v1/sessions", s.authed(false, s.handleSessionList))
	route("GET /v1/sessions/{id}", s.authed(false, s.handleSessionGet))
	route("DELETE /v1/sessions/{id}", s.authed(false, s.handleSessionDelete))
	route("POST /v1/sessions/{id}/pause", s.authed(false, s.handleSessionPause))
	route("POST /v1/sessions/{id}/resume", s.authed(false, s.handleSessionResume))
	route("POST /v1/sessions/{id}/exec", s.authed(false, s.handleExec))
	route("GET /v1/sessions/{id}/exec/{eid}", s.authed(false, s.handleExecGet))
	route("GET /v1/sessions/{id}/exec/{eid}/events", s.authed(false, s.handleExecEvents))
	route("GET /v1/sessions/{id}/processes", s.authed(false, s.handleProcessList))
	route("GET /v1/sessions/{id}/processes/{eid}", s.authed(false, s.handleProcessGet))
	route("DELETE /v1/sessions/{id}/processes/{eid}", s.authed(false, s.handleProcessKill))
	route("POST /v1/sessions/{id}/processes/{eid}/stdin", s.authed(false, s.handleProcessStdin))
	route("GET /v1/sessions/{id}/files", s.authed(false, s.handleFileList))
	route("GET /v1/sessions/{id}/files/stat", s.authed(false, s.handleFileStat))
	route("GET /v1/sessions/{id}/files/content", s.authed(false, s.handleDownload))
	route("PUT /v1/sessions/{id}/files/content", s.authed(false, s.handleUpload))
	route("DELETE /v1/sessions/{id}/files/content", s.authed(false, s.handleFileRemove))
	route("GET /v1/sessions/{id}/files/archive", s.authed(false, s.handleArchiveGet))
	route("PUT /v1/sessions/{id}/files/archive", s.authed(false, s.handleArchivePut))
	route("POST /v1/plugins", s.authed(true, s.handlePluginInstall))
	route("GET /v1/plugins", s.authed(false, s.handlePluginList))
	route("GET /v1/plugins/{name}", s.authed(false, s.handlePluginGet))
	route("DELETE /v1/plugins/{name}", s.authed(true, s.handlePluginRemove))
	route("POST /v1/plugins/{name}/call", s.authed(false, s.handlePluginCall))
	route("GET /v1/backends", s.authed(false, s.handleBackends))
	route("POST /v1/backends/{name}/certify", s.authed(true, s.handleCertify))
	route("GET /metrics", s.authed(true, func(w http.ResponseWriter, r *http.Request, _ *tenant) {
		s.met.handler().ServeHTTP(w, r)
	}))
	route("GET /v1/openapi.yaml", s.authed(false, func(w http.ResponseWriter, r *http.Request, _ *tenant) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Write(OpenAPI)
	}))
	route("/mcp", s.authed(false, s.mcpRoute(mux)))
	route("GET /ui/state", s.authed(true, s.handleUIState))
	mux.Handle("GET /ui/", s.uiHandler())
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	route("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	route("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		switch {
		case !s.ready.Load() && len(s.warm) > 0 && !s.closing.Load():
			s.writeError(w, s.warmingError())
		case !s.ready.Load():
			s.writeError(w, Unavailable)
		default:
			writeJSON(w, http.StatusOK, readiness{Status: "ready", Pools: s.warmth(true)})
		}
	})
	route("/", s.authed(false, func(w http.ResponseWriter, r *http.Request, _ *tenant) {
		s.writeError(w, fmt.Errorf("%w: no route %s %s", NotFound, r.Method, r.URL.Path))
	}))
	return mux
}

// readiness is /readyz's body when ready: the default pools' fill.
type readiness struct {
	Status string       `json:"status"`
	Pools  []PoolWarmth `json:"pools,omitempty"`
}

// statusWriter records the status for the request counter.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) { w.code = code; w.ResponseWriter.WriteHeader(code) }
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *Server) counted(route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, r)
		s.met.requests.WithLabelValues(route, fmt.Sprint(sw.code)).Inc()
	})
}
