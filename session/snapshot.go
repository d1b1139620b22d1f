package session

import (
	"context"
	"errors"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// A session whose sandbox can be saved whole (sandbox.Pauser: gVisor's
// runsc checkpoint, a microVM's SaveAll) pauses by snapshot where the
// manager can discard snapshots (Config.Discard): its backend keeps the
// sandbox, processes and all, as the tenant's (package snapshot), and the
// session records its name (store.ResumeSnapshot, Session.Paused). Its
// background execs stay running in the record, through a daemon restart
// too. The resume goes through Config.Reacquire with that name: the same
// backend, refused while it may not hold the session, the saved sandbox
// restored for the session's tenant only and claimed with the session's
// claim. The saved sandbox is discarded only once the resumed record is
// durable, so a failure or a crash leaves the session paused and whole. A
// sandbox that cannot be saved, or whose save fails while it still runs,
// pauses by keeping its workspace instead (pause.go).

// pauseSnapshot pauses l by snapshot (op held, l running). done says it
// was tried to the end: the sandbox is gone, and err says whether the
// session is paused. Not done, the sandbox is as it was.
func (m *Manager) pauseSnapshot(ctx context.Context, l *live, reason string) (done bool, err error) {
	pz, ok := l.sb.(sandbox.Pauser)
	if !ok || m.discard == nil {
		return false, nil
	}
	p, err := pz.Pause(ctx, l.tenant)
	if err != nil {
		if !errors.Is(err, sandbox.ErrNoSnapshot) {
			m.log.Warn("session snapshot failed; keeping its workspace instead", "id", l.id, "tenant", l.tenant, "error", err)
		}
		return false, nil
	}
	err = m.recordThen(l, store.SessionPaused, reason, m.now(), func(r *store.Session) {
		r.Resume, r.Paused, r.PausedBytes = store.ResumeSnapshot, &p, p.Bytes
	}, func() { m.giveBack(l) })
	if err != nil {
		m.giveBack(l) // stopped by its checkpoint whatever the record says
		m.discardPaused(l, p)
		return true, sandbox.Wrap(sandbox.BackendFailure, err, "record session")
	}
	m.log.Info("session", "id", l.id, "tenant", l.tenant, "backend", l.backend, "state", store.SessionPaused,
		"reason", reason, "resume", store.ResumeSnapshot, "paused", p.ID, "bytes", p.Bytes)
	return true, nil
}

// resumeSnapshot restores paused l's saved sandbox p (op held). A failure
// gives back what was restored and leaves l paused; a saved sandbox gone
// from its backend ends l (workspace-lost).
func (m *Manager) resumeSnapshot(ctx context.Context, l *live, reason string, p sandbox.Paused) error {
	_, fail, err := m.reopen(ctx, l, &p)
	if sandbox.ClassOf(err) == sandbox.NotFound {
		m.log.Warn("paused session lost its saved sandbox", "id", l.id, "tenant", l.tenant, "paused", p.ID, "error", err)
		m.end(l, store.SessionEnded, ReasonWorkspaceLost, m.now())
		return ended(l.view().Session)
	}
	if err != nil {
		return err
	}
	err = m.recordWith(l, store.SessionRunning, reason, m.now(), func(r *store.Session) { r.Paused, r.PausedBytes = nil, 0 })
	if err != nil {
		return fail(sandbox.Wrap(sandbox.BackendFailure, err, "record session"))
	}
	m.discardPaused(l, p)
	m.log.Info("session", "id", l.id, "tenant", l.tenant, "backend", l.backend, "state", store.SessionRunning,
		"reason", reason, "resume", store.ResumeSnapshot, "paused", p.ID)
	return nil
}

// giveBack releases l's sandbox (op held), which destroys it.
func (m *Manager) giveBack(l *live) {
	release := l.release
	l.sb, l.release = nil, nil
	if release != nil {
		if err := release(); err != nil {
			m.log.Error("session sandbox release", "id", l.id, "tenant", l.tenant, "error", err)
		}
	}
}

// discardPaused deletes l's saved sandbox p; a failure is logged, and
// the next start-up discards what no paused session owns.
func (m *Manager) discardPaused(l *live, p sandbox.Paused) {
	if err := m.discard(context.Background(), p); err != nil {
		m.log.Warn("discard a session's saved sandbox", "id", l.id, "paused", p.ID, "error", err)
	}
}

// pausedBySnapshot says whether rec is a session paused by snapshot.
func pausedBySnapshot(rec *store.Session) bool {
	return rec.State == store.SessionPaused && rec.Resume == store.ResumeSnapshot && rec.Paused != nil
}

// SavedSandboxes returns the saved sandboxes that paused sessions own,
// for a start-up that discards the rest of what backends keep.
func (m *Manager) SavedSandboxes() map[sandbox.Paused]bool {
	out := map[sandbox.Paused]bool{}
	for _, l := range m.snapshot() {
		l.mu.Lock()
		if pausedBySnapshot(&l.rec) {
			out[sandbox.Paused{Backend: l.rec.Paused.Backend, ID: l.rec.Paused.ID}] = true
		}
		l.mu.Unlock()
	}
	return out
}

// runningBackground loads the background execs of session that its record
// keeps running: a session paused by snapshot found at start-up.
func (m *Manager) runningBackground(session string) (map[string]store.Exec, error) {
	recs, err := m.st.RunningExecs(session)
	if err != nil {
		return nil, err
	}
	bg := map[string]store.Exec{}
	for _, rec := range recs {
		if rec.Background {
			bg[rec.ID] = rec
		}
	}
	return bg, nil
}
