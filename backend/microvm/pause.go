package microvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/snapshot"
)

// A paused microVM (sandbox.Pauser) is a tenant's VM saved whole — device
// state and all of its RAM (vmm.Machine.SaveAll) — with its scratch disk,
// its identity and the network it had, under snapshots/paused/microvm/<id>
// (0700, files 0600), recorded as that tenant's. Resume restores it only
// for that tenant, into a VM as confined as any other: its own uid, cgroup,
// control socketpair and egress slot; the thaw reseeds its RNG, sets its
// clock and moves its NIC, and keeps its machine-id and boot_id, which are
// the session's. A paused VM is never a golden: goldens come only from
// Golden's capture, whose VM no tenant ran in.

// pausedMeta is a paused VM's own record beside snapshot.PausedRecord.
type pausedMeta struct {
	Template sandbox.Template  `json:"template"`
	Ident    snapshot.Identity `json:"identity"`
	Net      string            `json:"net,omitempty"`
	// Claim is the limits of the session the VM held (Open): its resume
	// is claimed only with the same. Nil: a paused invocation's VM.
	Claim *sandbox.Limits `json:"claim,omitempty"`
	// Tenant is the record's tenant, beside the store's: read by row 98's
	// positive control alone, which resumes without the store's check.
	Tenant string `json:"tenant"`
}

type paused struct {
	rec  *snapshot.PausedRecord
	meta pausedMeta
}

func wrongTenant(format string, args ...any) error {
	return &sandbox.Error{Class: sandbox.BadInput, Field: "tenant", Msg: fmt.Sprintf(format, args...), Err: sandbox.ErrWrongTenant}
}

// Pause implements sandbox.Pauser. A session's VM pauses between its
// jobs (the session's lock held throughout), its background processes
// with it.
func (s *vmSandbox) Pause(ctx context.Context, tenant string) (sandbox.Paused, error) {
	s.mu.Lock()
	ss := s.sess
	s.mu.Unlock()
	if ss != nil {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		if ss.broken != nil {
			return sandbox.Paused{}, sandbox.Wrap(sandbox.BackendFailure, ss.broken, "microvm: session sandbox %s is unusable", s.id)
		}
	}
	s.mu.Lock()
	switch {
	case s.st == running || s.st == destroyed || s.m == nil:
		s.mu.Unlock()
		return sandbox.Paused{}, sandbox.Errorf(sandbox.BackendFailure, "", "microvm sandbox %s cannot pause now (state %d, warm %v)", s.id, s.st, s.m != nil)
	case s.owner != "" && s.owner != tenant:
		s.mu.Unlock()
		return sandbox.Paused{}, wrongTenant("this microvm sandbox is tenant %q's", s.owner)
	}
	prev := s.st
	s.st = running // nothing runs or pauses meanwhile
	s.mu.Unlock()
	p, err := s.pause(ctx, tenant, ss)
	s.mu.Lock()
	if err != nil && s.st == running {
		s.st = prev
	}
	s.mu.Unlock()
	return p, err
}

func (s *vmSandbox) pause(ctx context.Context, tenant string, ss *vmSession) (sandbox.Paused, error) {
	store, err := s.b.snapshots()
	if err != nil {
		return sandbox.Paused{}, sandbox.Wrap(sandbox.BackendFailure, err, "paused sandboxes")
	}
	_, root, err := s.b.rootFor(ctx, s.p, s.tmpl.Image)
	if err != nil {
		return sandbox.Paused{}, err
	}
	build, err := store.BeginPaused(s.b.goldenKey(s.p, s.tmpl, root), tenant)
	if err != nil {
		return sandbox.Paused{}, sandbox.Wrap(sandbox.BackendFailure, err, "pause")
	}
	defer build.Abort()
	fail := func(err error, what string) (sandbox.Paused, error) {
		return sandbox.Paused{}, sandbox.Wrap(sandbox.BackendFailure, err, "pause microvm sandbox %s: %s", s.id, what)
	}
	if s.ident == (snapshot.Identity{}) {
		// A booted VM keeps the kernel's boot_id; from here on it has one
		// of wovyr's, like a clone.
		if s.ident, err = snapshot.NewIdentity(); err != nil {
			return fail(err, "identity")
		}
	}
	if what, err := s.saveTo(ctx, build.Path(goldenState), s.m.SaveAll); err != nil {
		return fail(err, what)
	}
	s.mu.Lock()
	s.st = spent
	s.mu.Unlock()
	if err := snapshot.CopyFile(build.Path(goldenScratch), s.scratch()); err != nil {
		return fail(err, "scratch disk")
	}
	meta := pausedMeta{Template: s.tmpl, Ident: s.ident, Tenant: tenant}
	if ss != nil {
		meta.Claim = &ss.lim
	}
	if s.net != nil {
		meta.Net = s.net.guest.String()
	}
	js, _ := json.Marshal(meta)
	if err := os.WriteFile(build.Path(goldenInfo), js, 0o600); err != nil {
		return fail(err, "record")
	}
	size := allocated(build.Path(goldenState), build.Path(goldenScratch), build.Path(goldenInfo))
	rec, err := build.Commit()
	if err != nil {
		return fail(err, "commit")
	}
	return sandbox.Paused{Backend: s.b.Name(), ID: rec.ID, Bytes: size}, nil
}

// allocated is the disk the files take (a scratch disk is sparse).
func allocated(paths ...string) int64 {
	var n int64
	for _, p := range paths {
		var st syscall.Stat_t
		if syscall.Stat(p, &st) == nil {
			n += st.Blocks * 512
		}
	}
	return n
}

// Resume implements sandbox.Resumer.
func (b *Backend) Resume(ctx context.Context, ps sandbox.Paused, tenant string) (sandbox.Sandbox, error) {
	if ps.Backend != b.Name() {
		return nil, sandbox.Errorf(sandbox.BadInput, "paused.backend", "a %q sandbox cannot resume on microvm", ps.Backend)
	}
	store, err := b.snapshots()
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "paused sandboxes")
	}
	if b.cfg.weak == battery.PausedAnyTenant {
		tenant = b.pausedOwner(ps.ID, tenant) // row 98's positive control only
	}
	rec, err := store.OpenPaused(b.Name(), ps.ID, tenant)
	switch {
	case errors.Is(err, snapshot.ErrWrongTenant):
		return nil, wrongTenant("paused sandbox %s is another tenant's", ps.ID)
	case errors.Is(err, snapshot.ErrNotFound):
		return nil, sandbox.Errorf(sandbox.NotFound, "paused.id", "no paused microvm sandbox %q", ps.ID)
	case err != nil:
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "paused sandbox %s", ps.ID)
	}
	pz := &paused{rec: rec}
	js, err := os.ReadFile(rec.Path(goldenInfo))
	if err == nil {
		err = json.Unmarshal(js, &pz.meta)
	}
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "paused sandbox %s: record", ps.ID)
	}
	p, err := b.preparable(ctx, pz.meta.Template)
	if err != nil {
		return nil, err
	}
	_, root, err := b.rootFor(ctx, p, pz.meta.Template.Image)
	if err != nil {
		return nil, err
	}
	if b.goldenKey(p, pz.meta.Template, root) != rec.Key {
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "paused sandbox %s was saved under another runtime, kernel or configuration: it cannot resume here", ps.ID)
	}
	s, err := b.prepare(ctx, p, pz.meta.Template, boot{paused: pz})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// pausedOwner is the tenant a paused VM's own record names, read without
// the store's check: for battery.PausedAnyTenant only.
func (b *Backend) pausedOwner(id, asker string) string {
	var meta pausedMeta
	js, err := os.ReadFile(filepath.Join(snapshotsDir(b.cfg.StateDir), "paused", b.Name(), filepath.Base(id), goldenInfo))
	if err != nil || json.Unmarshal(js, &meta) != nil || meta.Tenant == "" {
		return asker
	}
	return meta.Tenant
}

var (
	_ sandbox.Pauser  = (*vmSandbox)(nil)
	_ sandbox.Resumer = (*Backend)(nil)
)

// Discard implements sandbox.Resumer.
func (b *Backend) Discard(ctx context.Context, ps sandbox.Paused) error {
	store, err := b.snapshots()
	if err != nil {
		return err
	}
	return store.RemovePaused(b.Name(), ps.ID)
}

// PausedSandboxes implements sandbox.Resumer.
func (b *Backend) PausedSandboxes(ctx context.Context) ([]sandbox.Paused, error) {
	store, err := b.snapshots()
	if err != nil {
		return nil, err
	}
	return sandbox.PausedOf(b.Name(), store.PausedIDs)
}
