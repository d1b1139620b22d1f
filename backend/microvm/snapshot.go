package microvm

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/image"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/snapshot"
)

// A microVM golden snapshot (ADR 0018) is a warm VM of one template,
// captured after its agent answered and its warm-up job ran, before any
// tenant: guest RAM (a memfd the VM ran in, shared), the device state
// QEMU's migration wrote with x-ignore-shared (a few tens of KB: RAM is
// not in it), and the scratch disk as the guest left it. A clone is a new
// QEMU, unprivileged in its own cgroup like any VM, that maps the golden's
// RAM privately (copy-on-write; the memfd is sealed against writes, so not
// even a VMM a guest took over can change what later clones start from),
// reads the device state, gets a copy of the scratch disk, its own control
// socketpair and, with egress, its own slot and tap. Before the clone is
// handed out its agent thaws (agent.Thaw): reseeds the RNG from host
// entropy, sets the clock, takes a fresh machine-id and boot_id and moves
// its NIC to the clone's slot.

// The golden's files (snapshot.Build).
const (
	goldenRAM     = "ram"          // guest RAM, sparse
	goldenState   = "state"        // QEMU's device state stream
	goldenScratch = "scratch.ext4" // the scratch disk at capture
	goldenInfo    = "golden.json"  // goldenMeta
)

// goldenMeta is what a clone needs beyond the files: the network the
// golden was captured with, which its guest removes at thaw.
type goldenMeta struct {
	Net string `json:"net,omitempty"`
}

// maxClockSkew is how far a thawed clone's clock may be from the host's.
const maxClockSkew = 50 * time.Millisecond

// golden is a golden snapshot this process can restore.
type golden struct {
	key     snapshot.Key
	disk    *snapshot.Golden
	ram     *os.File // sealed memfd
	meta    goldenMeta
	tmpl    sandbox.Template
	invalid atomic.Bool
}

func (g *golden) ID() string  { return g.key.ID() }
func (g *golden) Valid() bool { return !g.invalid.Load() }

// snapshots is the backend's golden store, under the state directory.
func (b *Backend) snapshots() (*snapshot.Store, error) {
	return snapshot.Open(snapshotsDir(b.cfg.StateDir))
}

// goldenKey is tmpl's key on this node: the certification's key plus the
// template's digest (image and shape, its warm-up, and whether VMs have a
// NIC). A warm-up that cannot be read keys nothing a capture could have
// made: Prepare refuses the template.
func (b *Backend) goldenKey(p *probed, tmpl sandbox.Template, root string) snapshot.Key {
	l := tmpl.Limits.WithDefaults()
	warm, err := b.warmupFor(tmpl.Image)
	warmID := image.WarmupDigest(warm)
	if err != nil {
		warmID = "unreadable"
	}
	h := sha256.New()
	fmt.Fprintln(h, p.image.Digest, root, l.Memory, l.Disk, b.cfg.VCPUs, b.cfg.GuestOverhead, b.cfg.Network != nil, warmID)
	return snapshot.Key{
		Backend: b.Name(), Version: p.cap.Version, Kernel: cert.Kernel(),
		ConfigHash: p.cap.ConfigHash, Template: hex.EncodeToString(h.Sum(nil))[:24],
	}
}

// Golden implements sandbox.Snapshotter: the golden in memory, else the
// one on disk, else a capture.
func (b *Backend) Golden(ctx context.Context, tmpl sandbox.Template) (sandbox.Golden, error) {
	p, err := b.preparable(ctx, tmpl)
	if err != nil {
		return nil, err
	}
	if !snapshotsAllowed(b.cfg.weak) {
		return nil, sandbox.ErrNoSnapshot // other positive controls are never snapshotted
	}
	_, root, err := b.rootFor(ctx, p, tmpl.Image)
	if err != nil {
		return nil, err
	}
	key := b.goldenKey(p, tmpl, root)
	b.goldMu.Lock()
	defer b.goldMu.Unlock()
	if g := b.goldens[key.ID()]; g != nil && g.Valid() {
		return g, nil
	}
	store, err := b.snapshots()
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "golden snapshots")
	}
	g, err := b.loadGolden(store, key, tmpl)
	if errors.Is(err, snapshot.ErrNotFound) {
		g, err = b.capture(ctx, p, store, key, tmpl)
	}
	if err != nil {
		return nil, err
	}
	if b.goldens == nil {
		b.goldens = map[string]*golden{}
	}
	if old := b.goldens[key.ID()]; old != nil {
		old.ram.Close()
	}
	b.goldens[key.ID()] = g
	return g, nil
}

// loadGolden opens the golden another process captured.
func (b *Backend) loadGolden(store *snapshot.Store, key snapshot.Key, tmpl sandbox.Template) (*golden, error) {
	disk, err := store.Find(key)
	if err != nil {
		return nil, err
	}
	g := &golden{key: key, disk: disk, tmpl: tmpl}
	info, err := os.ReadFile(disk.Path(goldenInfo))
	if err == nil {
		err = json.Unmarshal(info, &g.meta)
	}
	if err == nil {
		g.ram, err = snapshot.LoadMemory(disk.Path(goldenRAM))
	}
	if err != nil {
		store.Remove(key) // damaged: capture anew
		return nil, snapshot.ErrNotFound
	}
	return g, nil
}

// capture boots a warm VM whose RAM is a fresh memfd, lets it reach ready
// and run its warm-up, saves its device state and keeps RAM, state and
// scratch disk as the golden. The VM is destroyed whatever happens.
func (b *Backend) capture(ctx context.Context, p *probed, store *snapshot.Store, key snapshot.Key, tmpl sandbox.Template) (*golden, error) {
	started := time.Now()
	l := tmpl.Limits.WithDefaults()
	ram, err := snapshot.NewMemory("wovyr-golden", b.guestRAM(l.Memory))
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "golden RAM")
	}
	g := &golden{key: key, ram: ram, tmpl: tmpl}
	fail := func(err error, what string) (*golden, error) {
		ram.Close()
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "capture a golden snapshot: %s", what)
	}
	build, err := store.Begin(key)
	if err != nil {
		return fail(err, "begin")
	}
	defer build.Abort()
	s, err := b.prepare(ctx, p, tmpl, boot{warm: true, ram: ram})
	if err != nil {
		return fail(err, "boot")
	}
	defer s.Destroy(context.WithoutCancel(ctx))
	if s.net != nil {
		g.meta.Net = s.net.guest.String()
	}
	if err := s.weakCapture(); err != nil {
		return fail(err, "the control's tenant job")
	}
	// The VMM is gone after saveTo: the RAM can be sealed (no shared
	// writable mapping remains) and its scratch disk copied.
	if what, err := s.saveTo(ctx, build.Path(goldenState), s.m.Save); err != nil {
		return fail(err, what)
	}
	if err := snapshot.Seal(ram); err != nil {
		return fail(err, "seal RAM")
	}
	if err := snapshot.CopyFile(build.Path(goldenScratch), s.scratch()); err != nil {
		return fail(err, "scratch disk")
	}
	if err := snapshot.SaveMemory(build.Path(goldenRAM), ram); err != nil {
		return fail(err, "RAM")
	}
	info, _ := json.Marshal(g.meta)
	if err := os.WriteFile(build.Path(goldenInfo), info, 0o600); err != nil {
		return fail(err, "record")
	}
	if g.disk, err = build.Commit(); err != nil {
		return fail(err, "commit")
	}
	b.cfg.Logger.Info("microvm golden snapshot captured", "golden", key.ID(), "took", time.Since(started))
	return g, nil
}

// saveTo writes the VM's state with save (Machine.Save or SaveAll) to a
// new 0600 file at path and stops the VM: once saved it must not run on,
// or its state would fork. On failure it says which step failed.
func (s *vmSandbox) saveTo(ctx context.Context, path string, save func(context.Context, *os.File) error) (string, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "state file", err
	}
	err = save(ctx, f)
	if err == nil {
		err = f.Sync()
	}
	f.Close()
	if err != nil {
		return "save", err
	}
	if err := s.m.Kill(); err != nil {
		return "stop the VM", err
	}
	return "", nil
}

// Restore implements sandbox.Snapshotter.
func (b *Backend) Restore(ctx context.Context, sg sandbox.Golden) (sandbox.Sandbox, error) {
	g, ok := sg.(*golden)
	if !ok || !g.Valid() {
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "microvm: not a valid golden snapshot of this backend")
	}
	p, err := b.preparable(ctx, g.tmpl)
	if err != nil {
		return nil, err
	}
	_, root, err := b.rootFor(ctx, p, g.tmpl.Image)
	if err != nil {
		return nil, err
	}
	if b.goldenKey(p, g.tmpl, root) != g.key {
		g.invalid.Store(true)
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "microvm: golden snapshot %s is stale", g.ID())
	}
	return b.prepare(ctx, p, g.tmpl, boot{golden: g})
}

// restore starts the clone's VM from g and thaws it with a fresh identity.
// Under a pooled backend it also runs the warm-up job: the clone's VMM
// starts with an empty translation cache.
func (s *vmSandbox) restore(ctx context.Context, g *golden) error {
	id, err := snapshot.NewIdentity()
	if err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "clone VM %s", s.id)
	}
	if s.net != nil && g.meta.Net == "" {
		return sandbox.Errorf(sandbox.BackendFailure, "", "golden snapshot %s has no network to move from", g.ID())
	}
	if err := s.resumeVM(ctx, g.disk.Path(goldenState), g.ram, id, g.meta.Net); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			g.invalid.Store(true)
		}
		return err
	}
	return nil
}

// resumeVM starts the sandbox's VM from the migration stream at statePath
// (over ram, or carrying RAM itself when ram is nil) and thaws it: host
// entropy, the host's clock, id, and its own slot's network in place of
// oldNet. The guest's clock must come back within maxClockSkew of the
// host's, or the VM is killed.
func (s *vmSandbox) resumeVM(ctx context.Context, statePath string, ram *os.File, id snapshot.Identity, oldNet string) error {
	state, err := os.Open(statePath)
	if err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "saved state")
	}
	defer state.Close()
	spec := s.warmSpec()
	spec.RAM, spec.Incoming = ram, state
	m, err := s.b.cfg.VMM.Start(ctx, spec)
	if err != nil {
		return err
	}
	conn := m.Port(agent.PortControl)
	deadline := s.bootDeadline(ctx)
	if s.b.cfg.weak == WeakNoThaw {
		var rep agent.VMReply
		if err := roundTrip(conn, deadline, agent.VMJob{Job: agent.Job{ID: "ready"}}, &rep, 1<<20); err != nil {
			m.Kill()
			return sandbox.Wrap(sandbox.BackendFailure, err, "clone VM %s did not answer", s.id)
		}
		s.m, s.conn = m, conn
		return nil
	}
	entropy := make([]byte, 64)
	if _, err := rand.Read(entropy); err != nil {
		m.Kill()
		return sandbox.Wrap(sandbox.BackendFailure, err, "entropy")
	}
	t := &agent.Thaw{Entropy: entropy, MachineID: id.MachineID, BootID: id.BootID}
	if s.net != nil {
		t.Net, t.Golden, t.MAC = s.net.guest.String(), oldNet, s.net.mac.String()
	}
	t.Clock = time.Now()
	var rep agent.VMReply
	err = roundTrip(conn, deadline, agent.VMJob{Job: agent.Job{ID: "thaw"}, Thaw: t}, &rep, 1<<20)
	switch {
	case err != nil:
	case rep.ID != "thaw":
		err = fmt.Errorf("thaw answered for %q", rep.ID)
	case rep.Setup != "":
		err = fmt.Errorf("guest thaw: %s", rep.Setup)
	default:
		s.skew, err = syncClock(conn, deadline)
	}
	if err != nil {
		m.Kill()
		return sandbox.Wrap(sandbox.BackendFailure, err, "restored VM %s did not thaw; console: %s", s.id, tail(m.Console(), 1024))
	}
	// A clone warms before a pool hands it out. A paused VM (no ram) was
	// warmed before its pause and resumes for a caller who waits: its
	// first job translates what a warm-up would, so one first would only
	// add a job to the wait (≈ 0.1 s under TCG).
	if s.b.cfg.Warm && ram != nil {
		if err := s.warmUp(conn, deadline); err != nil {
			m.Kill()
			return err
		}
	}
	s.m, s.conn, s.readyAt, s.ident = m, conn, rep.Boot, id
	return nil
}

// clockTolerance is how close syncClock brings a guest's clock.
const clockTolerance = 10 * time.Millisecond

// syncClock measures the guest's wall clock over pings and steps it until
// it is within clockTolerance of the host's, at most three times. A thaw
// sets the clock to the host's time at sending, so it lags by the thaw's
// one-way delay, tens of ms under TCG right after a restore. Each ping
// bounds the offset (Cristian's method): the guest read its clock between
// the host's send and receive, so the offset lies within half the round
// trip of the estimate at its midpoint. It returns the last estimate, and
// an error if, bound included, it is still beyond maxClockSkew.
func syncClock(conn net.Conn, deadline time.Time) (time.Duration, error) {
	var step, off, half time.Duration
	for range 4 {
		h1 := time.Now()
		var rep agent.VMReply
		if err := roundTrip(conn, deadline, agent.VMJob{Job: agent.Job{ID: "clock"}, ClockStep: step}, &rep, 1<<20); err != nil {
			return 0, err
		}
		h2 := time.Now()
		if rep.Setup != "" {
			return 0, fmt.Errorf("guest clock: %s", rep.Setup)
		}
		half = h2.Sub(h1) / 2
		off = rep.Clock.Sub(h1.Add(half))
		if off.Abs()+half <= clockTolerance {
			return off, nil
		}
		step = -off
	}
	if off.Abs()+half > maxClockSkew {
		return off, fmt.Errorf("the clone's clock stays %s off the host's (±%s), beyond %s", off, half, maxClockSkew)
	}
	return off, nil
}

// reconcileSnapshots removes golden builds a dead process left, and
// goldens whose key this node's probe no longer matches (p nil: builds
// only).
func (b *Backend) reconcileSnapshots(p *probed) error {
	store, err := b.snapshots()
	if err != nil {
		return err
	}
	var keep func(snapshot.Key) bool
	if p != nil {
		keep = snapshot.Current(p.cap.Version, p.cap.ConfigHash)
	}
	removed, err := store.Reconcile(b.Name(), keep)
	if len(removed) > 0 {
		b.cfg.Logger.Info("microvm: removed stale golden snapshots", "n", len(removed))
	}
	return err
}

var _ sandbox.Snapshotter = (*Backend)(nil)
