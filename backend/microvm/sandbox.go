package microvm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/wovyr/wovyr/image"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/snapshot"
	"github.com/wovyr/wovyr/vmimage"
	"github.com/wovyr/wovyr/vmm"
)

// state is a sandbox's place in its life. Legal transitions:
//
//	prepared → running → spent → destroyed
//	prepared → destroyed, spent → destroyed
//	prepared → running → held → running → held …  (a session: Open, its jobs)
//	held → running → spent (paused), held → destroyed
//
// running is also a Pause or an Open in progress: nothing else may start.
type state int

const (
	prepared state = iota
	running
	spent
	destroyed
	held // claimed by a session (Open), between its jobs
)

// vmSandbox is one VM's sandbox, one-shot or warm.
type vmSandbox struct {
	b     *Backend
	p     *probed
	id    string
	dir   string // per-VM directory, removed by Destroy
	tmpl  sandbox.Template
	limit sandbox.Limits // the template's limits with defaults
	warm  bool           // its VM runs and serves the control port (Config.Warm, or a clone)
	root  string         // the root disk: the template's, or the image's own
	// warmup is the template's declared warm-up command (image.Warmup),
	// run after the no-op one in every warm VM before any tenant.
	warmup []string

	mu      sync.Mutex
	st      state
	m       vmm.Machine // warm: the running VM
	conn    net.Conn    // warm: the control port
	readyAt time.Duration
	skew    time.Duration     // a restored VM: its clock's offset from the host's once synced (syncClock)
	ident   snapshot.Identity // a restored VM's machine-id and boot_id (zero: booted)
	owner   string            // the tenant whose code ran in it, or who resumed it
	// resumed is the limits of the session a resumed VM was paused in;
	// nil: booted, cloned, or a paused invocation's.
	resumed *sandbox.Limits
	sess    *vmSession // set by Open

	net        *vmNet // the VM's egress slot and tap; nil: no NIC
	uid, gid   uint32
	releaseUID func()
	reused     bool // the scratch disk came from a previous VM (a positive control only)
}

// Prepare implements sandbox.Backend: the per-VM directory and scratch
// disk, and for a warm backend the booted VM whose agent has answered.
func (b *Backend) Prepare(ctx context.Context, tmpl sandbox.Template) (sandbox.Sandbox, error) {
	p, err := b.preparable(ctx, tmpl)
	if err != nil {
		return nil, err
	}
	return b.prepare(ctx, p, tmpl, boot{warm: b.cfg.Warm})
}

// preparable checks tmpl and returns the probe a sandbox for it needs.
func (b *Backend) preparable(ctx context.Context, tmpl sandbox.Template) (*probed, error) {
	if tmpl.Kind != sandbox.KindCommand {
		return nil, sandbox.Errorf(sandbox.BadInput, "kind", "the microvm backend runs command workloads, not %q", tmpl.Kind)
	}
	if err := b.CheckImage(tmpl.Image); err != nil {
		return nil, err
	}
	return b.probed(ctx)
}

// boot says how prepare brings a sandbox's VM up.
type boot struct {
	warm   bool     // boot the VM now and serve over its control port
	ram    *os.File // a golden capture: guest RAM shared in this memfd
	golden *golden  // a clone: restore the VM from this golden instead
	paused *paused  // a tenant's paused VM: resume it
}

func (b *Backend) prepare(ctx context.Context, p *probed, tmpl sandbox.Template, how boot) (*vmSandbox, error) {
	if len(tmpl.GPUs) > 0 {
		if err := b.GPUSupport(ctx); err != nil {
			return nil, sandbox.Wrap(sandbox.BackendFailure, err, "microvm: GPU template")
		}
		// Its devices are bound to vfio-pci only while its invocation's VM
		// runs (passThrough): a VM booted ahead would hold them unassigned.
		how.warm = false
	}
	s := &vmSandbox{b: b, p: p, id: randomID(), tmpl: tmpl, limit: tmpl.Limits.WithDefaults(), warm: how.warm || how.golden != nil || how.paused != nil}
	root, _, err := b.rootFor(ctx, p, tmpl.Image)
	if err != nil {
		return nil, err
	}
	s.root = root
	if s.warmup, err = b.warmupFor(tmpl.Image); err != nil {
		return nil, err
	}
	s.dir = filepath.Join(vmsDir(b.cfg.StateDir), "wovyr-vm-"+s.id)
	cleanup := []func(){}
	undo := func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}
	if err := os.MkdirAll(vmsDir(b.cfg.StateDir), 0o700); err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "create VM directory")
	}
	if err := os.Mkdir(s.dir, 0o700); err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "create VM directory")
	}
	cleanup = append(cleanup, func() { os.RemoveAll(s.dir) })
	if s.uid, s.gid, s.releaseUID, err = b.vmUser(p); err != nil {
		undo()
		return nil, err
	}
	cleanup = append(cleanup, s.releaseUID)
	switch {
	case how.golden != nil:
		// The guest resumes with the golden's scratch filesystem mounted:
		// the clone's disk is a copy of it, holding only what the
		// template's warm-up wrote.
		err = snapshot.CopyFile(s.scratch(), how.golden.disk.Path(goldenScratch))
	case how.paused != nil:
		err = snapshot.CopyFile(s.scratch(), how.paused.rec.Path(goldenScratch))
	default:
		err = vmimage.MakeExt4(ctx, "", s.scratch(), "wovyr-scratch", b.scratchSize(s.limit.Disk))
	}
	if err != nil {
		undo()
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "scratch disk")
	}
	s.reused = s.weakPrepared()
	if s.warm && b.cfg.Network != nil {
		// A warm VM's NIC exists from boot; its slot denies everything
		// until Run applies the tenant's policy.
		if s.net, err = b.newVMNet(ctx); err != nil {
			undo()
			return nil, err
		}
		cleanup = append(cleanup, func() { s.net.close(context.WithoutCancel(ctx)) })
	}
	switch {
	case how.golden != nil:
		err = s.restore(ctx, how.golden)
	case how.paused != nil:
		s.owner, s.resumed = how.paused.rec.Tenant, how.paused.meta.Claim
		err = s.resumeVM(ctx, how.paused.rec.Path(goldenState), nil, how.paused.meta.Ident, how.paused.meta.Net)
	case s.warm:
		err = s.bootWarm(ctx, how.ram)
	}
	if err != nil {
		undo()
		return nil, err
	}
	b.cfg.Logger.Debug("microvm sandbox prepared", "vm", s.id, "warm", s.warm, "clone", how.golden != nil)
	return s, nil
}

func (s *vmSandbox) scratch() string { return filepath.Join(s.dir, "scratch.ext4") }

// Run implements sandbox.Sandbox.
func (s *vmSandbox) Run(ctx context.Context, inv *sandbox.Invocation) (*sandbox.Result, error) {
	if err := s.b.checkInvocation(inv); err != nil {
		return nil, err
	}
	if img := inv.Workload.Image; img != "" && s.b.diskName(img) != s.b.diskName(s.tmpl.Image) {
		return nil, sandbox.Errorf(sandbox.BadInput, "workload.image", "sandbox was prepared for image %q, not %q", s.tmpl.Image, img)
	}
	s.mu.Lock()
	if s.st != prepared {
		st := s.st
		s.mu.Unlock()
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "microvm sandbox %s is not ready (state %d): a sandbox runs one invocation", s.id, st)
	}
	if s.owner != "" && inv.Tenant != s.owner {
		s.mu.Unlock()
		return nil, wrongTenant("this microvm sandbox runs tenant %q's invocations only", s.owner)
	}
	s.st = running
	s.owner = inv.Tenant
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.st == running {
			s.st = spent
		}
		s.mu.Unlock()
	}()
	if s.warm {
		return s.runWarm(ctx, inv)
	}
	return s.runOneShot(ctx, inv)
}

// Destroy implements sandbox.Sandbox: kill the VM (if any), verify it is
// gone, remove the per-VM directory. Idempotent.
func (s *vmSandbox) Destroy(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st == destroyed {
		return nil
	}
	s.st = destroyed
	var errs []error
	if s.conn != nil {
		s.conn.Close()
	}
	if s.m != nil {
		if err := s.m.Kill(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		// Only once the VM is gone: a slot is never handed on under a live guest.
		if err := s.net.close(context.WithoutCancel(ctx)); err != nil {
			errs = append(errs, err)
		}
	}
	s.weakDestroy()
	if err := os.RemoveAll(s.dir); err != nil {
		errs = append(errs, err)
	}
	if s.releaseUID != nil && len(errs) == 0 {
		s.releaseUID() // only once the VM is gone; else Reconcile frees it
	}
	return errors.Join(errs...)
}

// checkInvocation refuses what this backend cannot honour, before anything
// starts.
func (b *Backend) checkInvocation(inv *sandbox.Invocation) error {
	if err := inv.Validate(); err != nil {
		return err
	}
	w := inv.Workload
	switch {
	case w.Kind != sandbox.KindCommand:
		return sandbox.Errorf(sandbox.BadInput, "workload.kind", "the microvm backend runs command workloads, not %q", w.Kind)
	case len(w.Collect) > 0:
		return sandbox.Errorf(sandbox.Unenforceable, "workload.collect", "the microvm backend does not return files yet")
	case inv.Limits.CPU > 0:
		return sandbox.Errorf(sandbox.Unenforceable, "limits.cpu", "the microvm backend bounds CPU by the VM's quota and the wall limit, not by CPU time")
	}
	if err := b.CheckNetwork(inv.Policy.Network); err != nil {
		return err
	}
	return b.CheckImage(w.Image)
}

// CheckImage implements sandbox.ImageChecker: a template of the node's
// store (Config.TemplatesDir), or empty (or "default", when no template
// has that name) for the microVM image's own root disk.
func (b *Backend) CheckImage(name string) error {
	if name == "" || name == defaultImage || b.disks.known(name) {
		return nil
	}
	return unknownImage(name, fmt.Errorf("%w: %s", image.ErrNotFound, name))
}

// defaultImage names the microVM image's own root disk.
const defaultImage = "default"

// usesTemplate reports whether name selects a template's root disk rather
// than the image's own.
func (b *Backend) usesTemplate(name string) bool {
	return name != "" && (name != defaultImage || b.disks.known(name))
}

// warmupFor is the warm-up command template name declares (image.Warmup);
// the image's own root declares none.
func (b *Backend) warmupFor(name string) ([]string, error) {
	if !b.usesTemplate(name) {
		return nil, nil
	}
	argv, err := image.Warmup(b.disks.templates, name)
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "the warm-up of template %s", name)
	}
	return argv, nil
}

// diskName is the template whose root disk name selects; empty: the
// image's own.
func (b *Backend) diskName(name string) string {
	if b.usesTemplate(name) {
		return name
	}
	return ""
}

// unknownImage is the bad input of a template the node lacks; the fix,
// which only the operator can make, is in Err (tenants see only Msg).
func unknownImage(name string, cause error) error {
	return &sandbox.Error{Class: sandbox.BadInput, Field: "workload.image", Msg: fmt.Sprintf("no template %q on this node", name),
		Err: fmt.Errorf("%w (build it with wovyr image build, or wovyr image import)", cause)}
}

func randomID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // never fails on Linux
	}
	return hex.EncodeToString(b[:])
}
