package server

import (
	"cmp"
	"embed"
	"io/fs"
	"net/http"
	"slices"
	"time"

	"github.com/wovyr/wovyr/manager"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// The dashboard: /ui serves a page of embedded assets (no CDN, nothing
// fetched from elsewhere) to anyone, since it holds no data; the page asks
// for an admin token and polls /ui/state with it, which answers the node's
// whole live state as one JSON document. /ui/state is the page's feed, not
// part of the versioned API: its shape follows the page.
//
//go:embed ui
var uiAssets embed.FS

// uiCSP keeps the page to its own assets and its own origin's feed.
const uiCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Caps on the lists the feed sends each refresh.
const (
	dashInvocations = 50
	dashEndedSess   = 20
)

func (s *Server) uiHandler() http.Handler {
	sub, _ := fs.Sub(uiAssets, "ui")
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", uiCSP)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		files.ServeHTTP(w, r)
	})
}

// dashState is /ui/state's answer.
type dashState struct {
	Now         time.Time     `json:"now"`
	Started     time.Time     `json:"started"`
	Ready       bool          `json:"ready"`
	Draining    bool          `json:"draining"`
	Backends    []dashBackend `json:"backends"`
	Battery     []dashProbe   `json:"battery"`
	Pools       []dashPool    `json:"pools"`
	Tenants     []dashTenant  `json:"tenants"`
	Invocations []runSummary  `json:"invocations"` // live ones first, then the latest finished
	Sessions    []dashSession `json:"sessions"`
}

type dashBackend struct {
	Name        string     `json:"name"`
	Strength    string     `json:"strength"`
	Available   bool       `json:"available"`
	Reason      string     `json:"reason,omitempty"`
	Version     string     `json:"version,omitempty"`
	Accel       string     `json:"accel,omitempty"`
	Certified   bool       `json:"certified"`
	CertReason  string     `json:"cert_reason,omitempty"`
	CertifiedAt *time.Time `json:"certified_at,omitempty"`
}

// dashProbe is a row of the battery matrix: the probe's outcome on each
// backend with a certification record valid now ("pass", "fail",
// "unflagged" when its positive control did not flag, "n/a").
type dashProbe struct {
	ID    int               `json:"id"`
	Name  string            `json:"name"`
	Cells map[string]string `json:"cells"`
}

type dashPool struct {
	Key              string  `json:"key"`
	Backend          string  `json:"backend"`
	Template         string  `json:"template"`
	State            string  `json:"state"`
	Warm             int     `json:"warm"`
	Leased           int     `json:"leased"`
	Target           int     `json:"target"`
	Hits             uint64  `json:"hits"`
	Misses           uint64  `json:"misses"`
	HitRatio         float64 `json:"hit_ratio"`
	Restores         uint64  `json:"restores"`
	RestoreFallbacks uint64  `json:"restore_fallbacks"`
	CreateFailures   uint64  `json:"create_failures"`
}

type dashTenant struct {
	Name          string        `json:"name"`
	Weight        int64         `json:"weight"`
	Queued        int           `json:"queued"`
	Running       int           `json:"running"`
	DominantShare float64       `json:"dominant_share"`
	Admitted      uint64        `json:"admitted"`
	Rejected      uint64        `json:"rejected"`
	WaitP50       time.Duration `json:"wait_p50"`
	WaitP99       time.Duration `json:"wait_p99"`
	WaitSamples   int           `json:"wait_samples"` // of its last finished runs the dashboard remembers
}

type dashSession struct {
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant"`
	Backend   string    `json:"backend"`
	State     string    `json:"state"`
	Image     string    `json:"image,omitempty"`
	Created   time.Time `json:"created"`
	EndReason string    `json:"end_reason,omitempty"`
}

// handleUIState is GET /ui/state (admin): the dashboard's feed.
func (s *Server) handleUIState(w http.ResponseWriter, r *http.Request, _ *tenant) {
	st := dashState{Now: time.Now(), Started: s.started, Ready: s.ready.Load(), Draining: s.closing.Load()}
	sts := s.mgr.Detect(r.Context(), false)
	st.Backends, st.Battery = s.dashBackends(sts)
	st.Pools = s.dashPools()
	recent := s.recent.list()
	st.Tenants = s.dashTenants(recent)
	finished := make(map[string]bool, len(recent))
	for _, r := range recent {
		finished[r.ID] = true
	}
	st.Invocations = append(s.liveRuns(finished), recent[:min(len(recent), dashInvocations)]...)
	st.Invocations = st.Invocations[:min(len(st.Invocations), dashInvocations)]
	var err error
	if st.Sessions, err = s.dashSessions(); err != nil {
		s.writeError(w, sandbox.Wrap(sandbox.BackendFailure, err, "read sessions"))
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, st)
}

// dashBackends is each backend's status with its certification's time,
// and the battery matrix of the records valid now.
func (s *Server) dashBackends(sts []manager.Status) ([]dashBackend, []dashProbe) {
	out := make([]dashBackend, 0, len(sts))
	rows := map[int]*dashProbe{}
	for _, st := range sts {
		db := dashBackend{Name: st.Name, Strength: st.Strength.String(), Available: st.Capability.Available,
			Reason: st.Capability.Reason, Version: st.Capability.Version, Accel: st.Capability.Accel,
			Certified: st.Certified, CertReason: st.CertReason}
		if b, ok := s.mgr.Backend(st.Name); ok && st.Capability.Available {
			if rec, err := s.store.Cert(s.mgr.Key(b, st.Capability)); err == nil {
				at := rec.At
				db.CertifiedAt = &at
				for _, o := range rec.Outcomes {
					row := rows[o.ID]
					if row == nil {
						row = &dashProbe{ID: o.ID, Name: o.Name, Cells: map[string]string{}}
						rows[o.ID] = row
					}
					row.Cells[st.Name] = outcomeCell(o.Applies, o.Pass, o.ControlFlagged)
				}
			}
		}
		out = append(out, db)
	}
	matrix := make([]dashProbe, 0, len(rows))
	for _, r := range rows {
		matrix = append(matrix, *r)
	}
	slices.SortFunc(matrix, func(a, b dashProbe) int { return cmp.Compare(a.ID, b.ID) })
	return out, matrix
}

func outcomeCell(applies, pass, flagged bool) string {
	switch {
	case !applies:
		return "n/a"
	case !pass:
		return "fail"
	case !flagged:
		return "unflagged"
	}
	return "pass"
}

func (s *Server) dashPools() []dashPool {
	var out []dashPool
	for _, sn := range s.pools.Snapshots() {
		out = append(out, dashPool{Key: sn.Key.String(), Backend: sn.Key.Backend, Template: sn.Key.Template,
			State: sn.State(), Warm: sn.Warm, Leased: sn.InUse, Target: sn.Target, Hits: sn.Hits, Misses: sn.Misses,
			HitRatio: sn.HitRatio(), Restores: sn.Restores, RestoreFallbacks: sn.RestoreFallbacks,
			CreateFailures: sn.CreateFailures})
	}
	return out
}

// dashTenants is the scheduler's view per tenant (with the fair scheduler
// as admission; the plain limiter keeps no per-tenant state to show).
func (s *Server) dashTenants(recent []runSummary) []dashTenant {
	f, ok := s.adm.(*Fair)
	if !ok {
		return nil
	}
	waits := waitQuantiles(recent)
	capacity := f.Capacity()
	var out []dashTenant
	for _, ts := range f.Stats() {
		w := waits[ts.Tenant]
		out = append(out, dashTenant{Name: ts.Tenant, Weight: ts.Weight, Queued: ts.Queued, Running: ts.Running,
			DominantShare: ts.InUse.DominantShare(capacity), Admitted: ts.Admitted, Rejected: ts.Rejected,
			WaitP50: w.P50, WaitP99: w.P99, WaitSamples: w.Samples})
	}
	return out
}

// liveRuns are the invocations this daemon is queueing or running now,
// oldest first, but those finished (a job leaves s.jobs just after its
// summary is remembered).
func (s *Server) liveRuns(finished map[string]bool) []runSummary {
	s.mu.Lock()
	out := make([]runSummary, 0, len(s.jobs))
	now := time.Now()
	for _, j := range s.jobs {
		if finished[j.inv.ID] {
			continue
		}
		state := string(store.Queued)
		if j.started.Load() {
			state = string(store.Running)
		}
		out = append(out, runSummary{ID: j.inv.ID, Tenant: j.inv.Tenant, Backend: j.backend.Name(), State: state,
			Accepted: j.accepted, Total: now.Sub(j.accepted)})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b runSummary) int { return a.Accepted.Compare(b.Accepted) })
	return out
}

// dashSessions are the live sessions and the latest ended ones.
func (s *Server) dashSessions() ([]dashSession, error) {
	var live, ended []dashSession
	err := s.store.EachSession(func(r store.Session) error {
		d := dashSession{ID: r.ID, Tenant: r.Tenant, Backend: r.Backend, State: string(r.State), Image: r.Claim.Image,
			Created: r.Created, EndReason: r.EndReason}
		if r.State.Terminal() {
			ended = append(ended, d)
		} else {
			live = append(live, d)
		}
		return nil
	})
	newest := func(a, b dashSession) int { return b.Created.Compare(a.Created) }
	slices.SortFunc(live, newest)
	slices.SortFunc(ended, newest)
	return append(live, ended[:min(len(ended), dashEndedSess)]...), err
}
