package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/image"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/snapshot"
)

// A gVisor golden snapshot (ADR 0020) is a pooled sandbox of one template,
// its agent answering and its warm-up run, checkpointed by runsc before
// any tenant: the Sentry's whole state (its memory, the agent blocked on
// its next job) in one image file. A clone is a new sandbox with
// everything a cold pooled one has — its own id, uid range, rootfs
// overlay, cgroups, scratch and stdio pipes — started by `runsc restore`
// from that image instead of `runsc run`. The image names no host path
// that must stay the same: the Sentry's mounts are re-attached to the
// clone's bundle (its own rootfs, its own identity files) by position in
// the spec, which is built by the same code for every clone. Before a
// clone is handed out its agent re-executes itself (agent.Reexec) so that
// no in-process state seeded before the checkpoint survives; /dev/urandom
// needs nothing (the Sentry draws from the host on every read), and the
// clone's boot_id and machine-id are files the host wrote for it alone
// (identityMounts).
//
// Only a pooled backend with Config.Snapshots snapshots: a restore costs
// about what a cold start does here (ADR 0020), so it is the operator's
// choice, for templates whose warm-up a restore skips.

// goldenLayout names the format of this package's goldens: a change to
// what a golden holds or how clones are started bumps it, voiding them.
const goldenLayout = "gvisor-golden-1"

// checkpointImage is the file runsc checkpoint writes into --image-path.
const checkpointImage = "checkpoint.img"

// maxClockSkew is how far a thawed clone's clock may be from the host's.
const maxClockSkew = 50 * time.Millisecond

// bootIDPath is the kernel's (the Sentry's) per-boot id.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// boot says how prepare starts a sandbox.
type boot struct {
	// netstack: a gVisor sandbox for an allowlist (Template.Egress) — in
	// an egress slot, started only at Run once the slot is bound (egress.go).
	netstack bool
	capture  bool              // a golden's: identity mounts, agent-serving, warmed
	from     *golden           // a clone of it: runsc restore, then the agent's thaw
	paused   *pausedSandbox    // a tenant's paused sandbox: runsc restore, nothing thawed (pause.go)
	thawed   *agent.Thawed     // the clone agent's answer to its thaw
	ident    snapshot.Identity // what identityMounts gave it
	// gpus are the devices in its spec (a GPU template's, never snapshotted).
	gpus []sandbox.GPUDevice
}

func (b boot) cold() bool { return !b.capture && b.from == nil && b.paused == nil }

// startsAtClaim reports whether Prepare leaves the runtime unstarted, for
// the claim to start (oneshot.go): every netstack sandbox (cold or paused;
// none is a golden's or a clone), whose slot the claim binds before runsc
// starts or restores it (egress.go), and a cold sandbox where sandboxes
// are not pooled.
func (b boot) startsAtClaim(pooled bool) bool { return b.netstack || !pooled && b.cold() }

// identified says whether the sandbox has identity files of its own
// (identityMounts): goldens, clones, and a paused sandbox that had them.
func (b boot) identified() bool {
	return b.capture || b.from != nil || b.paused != nil && b.paused.meta.Ident != nil
}

// image is the checkpoint a restored sandbox starts from, or "".
func (b boot) image() string {
	switch {
	case b.from != nil:
		return b.from.disk.Dir
	case b.paused != nil:
		return b.paused.rec.Dir
	}
	return ""
}

// golden is a golden snapshot this process can restore.
type golden struct {
	key     snapshot.Key
	disk    *snapshot.Golden
	tmpl    sandbox.Template
	name    string // the template's image, default applied
	invalid atomic.Bool
}

func (g *golden) ID() string  { return g.key.ID() }
func (g *golden) Valid() bool { return !g.invalid.Load() }

// snapshotsDir is the golden store of every backend, under stateDir.
func snapshotsDir(stateDir string) string { return filepath.Join(stateDir, "snapshots") }

func (b *Backend) snapshots() (*snapshot.Store, error) {
	return snapshot.Open(snapshotsDir(b.cfg.StateDir))
}

// snapshotting reports whether b captures goldens at all.
func (b *Backend) snapshotting() bool {
	return b.gvisor && b.cfg.Pooled && b.cfg.Snapshots && (b.weak == "" || slices.Contains(cloneWeaknesses, b.weak))
}

// goldenKey is tmpl's key on this node: the certification's key plus the
// template's digest — its image directory (a rebuilt image is a new
// directory), its warm-up, its shape, and the agent and wasm runner the
// Sentry holds.
func (b *Backend) goldenKey(d *driver, name string, tmpl sandbox.Template) (snapshot.Key, error) {
	fi, err := os.Stat(image.RootFS(b.imagesDir(), name))
	if err != nil {
		return snapshot.Key{}, err
	}
	warm, err := image.Warmup(b.imagesDir(), name)
	if err != nil {
		return snapshot.Key{}, err
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if st == nil {
		return snapshot.Key{}, errors.New("no inode for the template")
	}
	h := sha256.New()
	fmt.Fprintln(h, goldenLayout, name, st.Dev, st.Ino, st.Ctim.Nano(), tmpl.Kind, tmpl.Limits.WithDefaults(),
		filepath.Base(b.agent), filepath.Base(b.runner), image.WarmupDigest(warm))
	return snapshot.Key{
		Backend: b.name, Version: d.version, Kernel: cert.Kernel(),
		ConfigHash: b.configHash(d), Template: hex.EncodeToString(h.Sum(nil))[:24],
	}, nil
}

// Golden implements sandbox.Snapshotter: the golden in memory, else the
// one on disk, else a capture.
func (b *Backend) Golden(ctx context.Context, tmpl sandbox.Template) (sandbox.Golden, error) {
	if !b.snapshotting() {
		return nil, sandbox.ErrNoSnapshot // nor is a positive control ever
	}
	if tmpl.Egress && b.gvisor {
		// A netstack sandbox starts in its slot only once the slot is
		// bound (egress.go): there is no tenant-neutral state to capture.
		return nil, sandbox.ErrNoSnapshot
	}
	name, d, err := b.preparable(ctx, tmpl)
	if err != nil {
		return nil, err
	}
	key, err := b.goldenKey(d, name, tmpl)
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "%s: golden snapshot key", b.name)
	}
	b.goldMu.Lock()
	defer b.goldMu.Unlock()
	if g := b.goldens[key.ID()]; g != nil && g.Valid() {
		return g, nil
	}
	store, err := b.snapshots()
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "golden snapshots")
	}
	g := &golden{key: key, tmpl: tmpl, name: name}
	g.disk, err = store.Find(key)
	if err == nil {
		if _, serr := os.Stat(g.disk.Path(checkpointImage)); serr != nil {
			store.Remove(key) // damaged: capture anew
			err = snapshot.ErrNotFound
		}
	}
	if errors.Is(err, snapshot.ErrNotFound) {
		g.disk, err = b.capture(ctx, d, store, key, name, tmpl)
	}
	if err != nil {
		return nil, err
	}
	if b.goldens == nil {
		b.goldens = map[string]*golden{}
	}
	b.goldens[key.ID()] = g
	return g, nil
}

// preparable checks tmpl as Prepare does and returns its image name and
// the runtime.
func (b *Backend) preparable(ctx context.Context, tmpl sandbox.Template) (string, *driver, error) {
	if tmpl.Kind != "" && !sandbox.Accepts(b, tmpl.Kind) {
		return "", nil, sandbox.Errorf(sandbox.BadInput, "template.kind", "%s backend does not run %s workloads (wasm needs Config.WasmRunner)", b.name, tmpl.Kind)
	}
	name := tmpl.Image
	if name == "" {
		name = b.cfg.DefaultImage
	}
	if err := b.checkImage(name, "template.image"); err != nil {
		return "", nil, err
	}
	d, err := b.chosen(ctx)
	return name, d, err
}

// capture prepares a pooled sandbox of tmpl (ready, warmed, no tenant),
// checkpoints it into a build and commits the build. runsc stops the
// sandbox once its image is written; it is destroyed whatever happens.
func (b *Backend) capture(ctx context.Context, d *driver, store *snapshot.Store, key snapshot.Key, name string, tmpl sandbox.Template) (*snapshot.Golden, error) {
	started := time.Now()
	fail := func(err error, what string) (*snapshot.Golden, error) {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "%s: capture a golden snapshot: %s", b.name, what)
	}
	build, err := store.Begin(key)
	if err != nil {
		return fail(err, "begin")
	}
	defer build.Abort()
	s, err := b.prepare(ctx, d, image.RootFS(b.imagesDir(), name), name, tmpl.Limits.WithDefaults(), boot{capture: true})
	if err != nil {
		return fail(err, "prepare")
	}
	defer s.Destroy(context.WithoutCancel(ctx))
	if err := s.weakCapture(ctx); err != nil {
		return fail(err, "the TenantGolden control's job")
	}
	if err := d.run(ctx, time.Minute, "checkpoint", "--compression=none", "--exclude-committed-zero-pages", "--image-path", build.Dir(), s.id); err != nil {
		return fail(err, "checkpoint")
	}
	// runsc writes its files 0644; a golden's are root's alone.
	ents, err := os.ReadDir(build.Dir())
	if err != nil {
		return fail(err, "list the image")
	}
	for _, e := range ents {
		if err := os.Chmod(build.Path(e.Name()), 0o600); err != nil {
			return fail(err, "image mode")
		}
	}
	if _, err := os.Stat(build.Path(checkpointImage)); err != nil {
		return fail(err, "image")
	}
	disk, err := build.Commit()
	if err != nil {
		return fail(err, "commit")
	}
	b.cfg.Logger.Info("gvisor golden snapshot captured", "golden", key.ID(), "image", name, "took", time.Since(started))
	return disk, nil
}

// Restore implements sandbox.Snapshotter.
func (b *Backend) Restore(ctx context.Context, sg sandbox.Golden) (sandbox.Sandbox, error) {
	g, ok := sg.(*golden)
	if !ok || !g.Valid() {
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "%s: not a valid golden snapshot of this backend", b.name)
	}
	name, d, err := b.preparable(ctx, g.tmpl)
	if err != nil {
		return nil, err
	}
	if key, err := b.goldenKey(d, name, g.tmpl); err != nil || key != g.key {
		g.invalid.Store(true)
		if store, serr := b.snapshots(); serr == nil {
			store.Remove(g.key)
		}
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "%s: golden snapshot %s is stale", b.name, g.ID())
	}
	if _, err := os.Stat(g.disk.Path(checkpointImage)); err != nil {
		g.invalid.Store(true)
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "%s: golden snapshot %s", b.name, g.ID())
	}
	s, err := b.prepare(ctx, d, image.RootFS(b.imagesDir(), name), name, g.tmpl.Limits.WithDefaults(), boot{from: g})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// checkThaw checks a clone agent's answer to its thaw, sent at sent and
// received at got, and keeps it.
func (s *Sandbox) checkThaw(t *agent.Thawed, sent, got time.Time) error {
	switch {
	case t == nil:
		return errors.New("thaw: the agent did not re-execute")
	case t.Clock.Before(sent.Add(-maxClockSkew)) || t.Clock.After(got.Add(maxClockSkew)):
		return fmt.Errorf("thaw: clone clock %s is off the host's (%s–%s) by more than %s",
			t.Clock.Format(time.RFC3339Nano), sent.Format(time.RFC3339Nano), got.Format(time.RFC3339Nano), maxClockSkew)
	}
	s.boot.thawed = t
	return nil
}

// reconcileSnapshots removes golden builds a dead process left and
// goldens keep rejects (nil: builds only).
func reconcileSnapshots(stateDir, backend string, keep func(snapshot.Key) bool) error {
	store, err := snapshot.Open(snapshotsDir(stateDir))
	if err != nil {
		return err
	}
	_, err = store.Reconcile(backend, keep)
	return err
}

// afterProbe voids the goldens the probe's answer no longer matches.
func (b *Backend) afterProbe(d *driver, configHash string) {
	if !b.gvisor || b.weak != "" {
		return
	}
	err := reconcileSnapshots(b.cfg.StateDir, b.name, snapshot.Current(d.version, configHash))
	if err != nil {
		b.cfg.Logger.Warn("gvisor: reconcile golden snapshots", "err", err)
	}
}

var _ sandbox.Snapshotter = (*Backend)(nil)
