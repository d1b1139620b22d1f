package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/idmap"
	"github.com/wovyr/wovyr/image"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/snapshot"
)

// A paused gVisor sandbox (sandbox.Pauser) is a tenant's session sandbox
// checkpointed whole by runsc — the Sentry's memory with every process in
// it, the agent and its background jobs among them — beside the one piece
// of host state the Sentry's view depends on: the upper layer of its root
// filesystem, a tmpfs that goes with the sandbox. Both are kept under
// snapshots/paused/<backend>/<id> (0700, files 0600, root's), recorded as
// that tenant's (package snapshot), and resumed only for that tenant into
// a sandbox confined as any other: its own id, uid range, cgroups, scratch
// and stdio, the upper layer unpacked into its own tmpfs with its files'
// owners moved into the new uid range. The spec is built by the same code
// as the paused sandbox's, so runsc re-attaches every mount by position;
// a clone's identity files are the paused clone's, which are the session's.
//
// A paused sandbox is never a golden: nothing restores it but its tenant's
// resume, which consumes it. A netstack sandbox (in an egress slot) pauses
// too: its slot goes with it, and it resumes in a fresh slot bound to the
// session's policy before runsc restores it, as a netstack sandbox starts
// (egress.go); runsc configures the restored netstack from that slot's
// namespace (ADR 0043). runc's and crun's sandboxes do not pause this way
// (CRIU is not adopted, ADR 0033): the session package keeps their
// workspace instead.

const (
	pausedInfo  = "sandbox.json" // pausedMeta
	pausedUpper = "upper.tar"    // the rootfs's upper layer, owners as they were
)

// pausedMeta is a paused sandbox's own record beside snapshot.PausedRecord.
type pausedMeta struct {
	Tenant string         `json:"tenant"` // as the store's record has it
	Image  string         `json:"image"`
	Limits sandbox.Limits `json:"limits"` // the template's shape
	Claim  sandbox.Limits `json:"claim"`  // the session's limits, as its agent holds them
	// Ident is a clone's identity files (nil for a sandbox booted cold,
	// whose spec has none): the resumed spec must have the same mounts.
	Ident *snapshot.Identity `json:"identity,omitempty"`
	IDs   idmap.Range        `json:"ids"` // the range the upper's files are owned in
	// Netstack: the sandbox ran its network in the Sentry, in an egress
	// slot; it resumes in one.
	Netstack bool `json:"netstack,omitempty"`
}

// pausedSandbox is a paused sandbox being resumed.
type pausedSandbox struct {
	rec  *snapshot.PausedRecord
	meta pausedMeta
}

// errPaused marks a session sandbox whose Sentry a checkpoint stopped.
var errPaused = errors.New("the sandbox was paused (checkpointed and stopped)")

func wrongTenant(format string, args ...any) error {
	return &sandbox.Error{Class: sandbox.BadInput, Field: "tenant", Msg: fmt.Sprintf(format, args...), Err: sandbox.ErrWrongTenant}
}

// unpausable says why s cannot be checkpointed for a session, or "".
func (s *Sandbox) unpausable() string {
	switch {
	case !s.b.gvisor:
		return "only gVisor sandboxes checkpoint (CRIU is not adopted)"
	case s.b.weak != "" && s.b.weak != battery.PausedAnyTenant:
		return "a positive control's sandbox"
	case len(s.boot.gpus) > 0:
		return "it holds GPU devices"
	}
	return ""
}

// pausedTemplate is the template s was prepared for, as far as a paused
// sandbox's key depends on it.
func (s *Sandbox) pausedTemplate() sandbox.Template {
	return sandbox.Template{Image: s.image, Limits: s.limits}
}

// Pause implements sandbox.Pauser for a session sandbox (Open): runsc
// checkpoints it, which stops it, and its upper layer is kept beside the
// image. A sandbox that cannot checkpoint says sandbox.ErrNoSnapshot and
// is left as it was; another tenant's is refused with ErrWrongTenant.
func (s *Sandbox) Pause(ctx context.Context, tenant string) (sandbox.Paused, error) {
	if why := s.unpausable(); why != "" {
		return sandbox.Paused{}, fmt.Errorf("%s sandbox %s cannot pause: %s: %w", s.b.name, s.id, why, sandbox.ErrNoSnapshot)
	}
	ss, err := s.opened()
	if err != nil {
		return sandbox.Paused{}, err
	}
	defer ss.mu.Unlock()
	if ss.claim.Tenant != tenant {
		return sandbox.Paused{}, wrongTenant("this %s sandbox is tenant %q's", s.b.name, ss.claim.Tenant)
	}
	p, err := s.pause(ctx, ss, tenant)
	if err != nil {
		return sandbox.Paused{}, sandbox.Wrap(sandbox.BackendFailure, err, "%s: pause %s", s.b.name, s.id)
	}
	return p, nil
}

func (s *Sandbox) pause(ctx context.Context, ss *session, tenant string) (sandbox.Paused, error) {
	started := time.Now()
	store, err := s.b.snapshots()
	if err != nil {
		return sandbox.Paused{}, err
	}
	key, err := s.b.goldenKey(s.d, s.image, s.pausedTemplate())
	if err != nil {
		return sandbox.Paused{}, fmt.Errorf("key: %w", err)
	}
	build, err := store.BeginPaused(key, tenant)
	if err != nil {
		return sandbox.Paused{}, err
	}
	defer build.Abort()
	err = s.d.run(ctx, time.Minute, "checkpoint", "--compression=none", "--image-path", build.Dir(), s.id)
	if s.stopped(10 * time.Second) {
		ss.broken = errPaused // whatever the checkpoint said, nothing runs here again
	}
	if err != nil {
		return sandbox.Paused{}, fmt.Errorf("checkpoint: %w", err)
	}
	if ss.broken == nil {
		ss.broken = errPaused
		return sandbox.Paused{}, errors.New("checkpoint: the sandbox did not stop")
	}
	if err := saveUpper(ctx, filepath.Join(s.dir, "upper", "data"), build.Path(pausedUpper)); err != nil {
		return sandbox.Paused{}, fmt.Errorf("keep the upper layer: %w", err)
	}
	meta := pausedMeta{Tenant: tenant, Image: s.image, Limits: s.limits, Claim: ss.lim, IDs: s.slot.ids, Netstack: s.boot.netstack}
	if s.boot.identified() {
		id := s.boot.ident
		meta.Ident = &id
	}
	js, _ := json.Marshal(meta)
	if err := os.WriteFile(build.Path(pausedInfo), js, 0o600); err != nil {
		return sandbox.Paused{}, err
	}
	size, err := privateFiles(build.Dir())
	if err != nil {
		return sandbox.Paused{}, err
	}
	rec, err := build.Commit()
	if err != nil {
		return sandbox.Paused{}, err
	}
	s.b.cfg.Logger.Info("gvisor sandbox paused", "id", s.id, "paused", rec.ID, "tenant", tenant, "bytes", size, "took", time.Since(started))
	return sandbox.Paused{Backend: s.b.name, ID: rec.ID, Bytes: size}, nil
}

// stopped waits up to limit for the foreground runtime to exit, which it
// does once its sandbox is gone.
func (s *Sandbox) stopped(limit time.Duration) bool {
	if s.runtime == nil {
		return true
	}
	select {
	case <-s.runtime:
		return true
	case <-time.After(limit):
		return false
	}
}

// privateFiles makes the files runsc wrote into dir (0644) root's alone
// and returns the bytes dir holds.
func privateFiles(dir string) (int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var size int64
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if err := os.Chmod(p, 0o600); err != nil {
			return 0, err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return 0, err
		}
		size += fi.Size()
	}
	return size, nil
}

// Resume implements sandbox.Resumer: the paused sandbox ps of tenant,
// restored by runsc into a new sandbox, claimed by Open with the session's
// claim as at its creation. ps stays until Discard.
func (b *Backend) Resume(ctx context.Context, ps sandbox.Paused, tenant string) (sandbox.Sandbox, error) {
	if !b.gvisor || ps.Backend != b.name {
		return nil, sandbox.Errorf(sandbox.BadInput, "paused.backend", "a %q sandbox cannot resume on %s", ps.Backend, b.name)
	}
	store, err := b.snapshots()
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "paused sandboxes")
	}
	if b.weak == battery.PausedAnyTenant {
		tenant = b.pausedOwner(ps.ID, tenant) // row 98's positive control only
	}
	rec, err := store.OpenPaused(b.name, ps.ID, tenant)
	switch {
	case errors.Is(err, snapshot.ErrWrongTenant):
		return nil, wrongTenant("paused sandbox %s is another tenant's", ps.ID)
	case errors.Is(err, snapshot.ErrNotFound):
		return nil, sandbox.Errorf(sandbox.NotFound, "paused.id", "no paused %s sandbox %q", b.name, ps.ID)
	case err != nil:
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "paused sandbox %s", ps.ID)
	}
	pz := &pausedSandbox{rec: rec}
	js, err := os.ReadFile(rec.Path(pausedInfo))
	if err == nil {
		err = json.Unmarshal(js, &pz.meta)
	}
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "paused sandbox %s: record", ps.ID)
	}
	tmpl := sandbox.Template{Image: pz.meta.Image, Limits: pz.meta.Limits}
	name, d, err := b.preparable(ctx, tmpl)
	if err != nil {
		return nil, err
	}
	how, keyed := boot{paused: pz}, d
	if pz.meta.Netstack {
		if !b.egressCapable() {
			return nil, sandbox.Errorf(sandbox.Unenforceable, "policy.network", "paused sandbox %s ran in an egress slot, and this %s backend has no egress service", ps.ID, b.name)
		}
		how.netstack, keyed = true, d.netstack()
	}
	if key, err := b.goldenKey(keyed, name, tmpl); err != nil || key != rec.Key {
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "paused sandbox %s was saved under another runtime, kernel, configuration or image: it cannot resume here", ps.ID)
	}
	s, err := b.prepare(ctx, d, image.RootFS(b.imagesDir(), name), name, pz.meta.Limits, how)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// pausedOwner is the tenant a paused sandbox's own record names, read
// without the store's check: for battery.PausedAnyTenant only.
func (b *Backend) pausedOwner(id, asker string) string {
	var meta pausedMeta
	js, err := os.ReadFile(filepath.Join(snapshotsDir(b.cfg.StateDir), "paused", b.name, filepath.Base(id), pausedInfo))
	if err != nil || json.Unmarshal(js, &meta) != nil {
		return asker
	}
	return meta.Tenant
}

// Discard implements sandbox.Resumer.
func (b *Backend) Discard(ctx context.Context, ps sandbox.Paused) error {
	store, err := b.snapshots()
	if err != nil {
		return err
	}
	return store.RemovePaused(b.name, ps.ID)
}

// PausedSandboxes implements sandbox.Resumer.
func (b *Backend) PausedSandboxes(ctx context.Context) ([]sandbox.Paused, error) {
	store, err := b.snapshots()
	if err != nil {
		return nil, err
	}
	return sandbox.PausedOf(b.name, store.PausedIDs)
}

var (
	_ sandbox.Pauser  = (*Sandbox)(nil)
	_ sandbox.Resumer = (*Backend)(nil)
)
