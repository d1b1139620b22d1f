package oci

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/cgroup"
	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/hostlock"
	"github.com/wovyr/wovyr/image"
	"github.com/wovyr/wovyr/sandbox"
)

// Sandbox is one prepared container: running the agent (Config.Pooled), or
// a bundle whose runtime Run starts (oneshot.go). It runs at most one
// invocation, or holds one session (session.go); Destroy releases
// everything it holds.
type Sandbox struct {
	b        *Backend
	d        *driver
	id       string // container id, "wovyr-c-…" or "wovyr-g-…"
	dir      string // scratch + bundle: <run>/sb/<id>
	image    string
	limits   sandbox.Limits // the template's shape
	slot     *slot
	net      *egress.Slot // nil without Config.Network (see egress.go)
	lock     *os.File     // held while the sandbox lives (see locks.go)
	client   *agent.Client
	agentPID int                   // host pid of the container init (container only)
	agentFD  int                   // pidfd of the agent, or -1
	runtime  chan struct{}         // closed when the foreground runtime has exited
	stderr   *sandbox.SharedCapped // the runtime's and agent's stderr, capped
	oneShot  bool                  // Prepare starts nothing; the claim does (boot.startsAtClaim, oneshot.go)
	boot     boot                  // cold, a golden's capture or a clone (snapshot.go)
	spec     *specs.Spec           // as Prepare wrote it; a one-shot Run fills in the process

	mu      sync.Mutex
	used    bool
	sess    *session                      // set by Open (session.go)
	tenant  *cgroup.Group                 // sandboxCgroup; claim writes the tenant's limits here
	written cgroup.Limits                 // what tenant enforces now
	leaf    *cgroup.Group                 // poolCgroup, the runtime's
	base    cgroup.Stats                  // tenant's counters at claim
	oomFD   int                           // watchOOM's eventfd on tenant (v1), or -1
	cleanup []func(context.Context) error // reverse order
	gone    bool
}

// sandboxCgroup is the sandbox's own cgroup, made by wovyr at Prepare and
// kept until Destroy: claim writes the tenant's limits into it and usage is
// read from it, also after the runtime removed its own cgroup below it. "_"
// cannot start a tenant name, so it never collides with a tenant's.
func sandboxCgroup(id string) string { return cgroup.Prefix + "/_pool/" + id }

// poolCgroup is the runtime's cgroup (linux.cgroupsPath) inside the
// sandbox's: where the sandbox's processes are, under the template's limits.
func poolCgroup(id string) string { return sandboxCgroup(id) + "/runtime" }

func newID(gvisor bool) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	if gvisor {
		return "wovyr-g-" + hex.EncodeToString(b[:])
	}
	return "wovyr-c-" + hex.EncodeToString(b[:])
}

// Prepare implements sandbox.Backend: it builds the bundle, creates and
// starts the container and waits until the agent answers. Each step is named
// in its error; a failure undoes what was done.
func (b *Backend) Prepare(ctx context.Context, tmpl sandbox.Template) (sandbox.Sandbox, error) {
	if tmpl.Kind != "" && !sandbox.Accepts(b, tmpl.Kind) {
		return nil, sandbox.Errorf(sandbox.BadInput, "template.kind", "%s backend does not run %s workloads (wasm needs Config.WasmRunner)", b.name, tmpl.Kind)
	}
	name := tmpl.Image
	if name == "" {
		name = b.cfg.DefaultImage
	}
	if err := b.checkImage(name, "template.image"); err != nil {
		return nil, err
	}
	d, err := b.chosen(ctx)
	if err != nil {
		return nil, err
	}
	if len(tmpl.GPUs) > 0 {
		if err := b.GPUSupport(ctx); err != nil {
			return nil, sandbox.Wrap(sandbox.BackendFailure, err, "%s: GPU template", b.name)
		}
		if b.gvisor {
			if err := nvproxyDevices(tmpl.GPUs); err != nil {
				return nil, sandbox.Wrap(sandbox.BackendFailure, err, "%s: GPU template", b.name)
			}
		}
	}
	how := boot{netstack: b.gvisor && tmpl.Egress && b.cfg.Network != nil, gpus: tmpl.GPUs}
	sb, err := b.prepare(ctx, d, image.RootFS(b.imagesDir(), name), name, tmpl.Limits.WithDefaults(), how)
	if err != nil && ctx.Err() == nil && errors.Is(err, io.EOF) {
		// The runtime's sandbox died before its agent answered (runsc
		// under heavy load, seen rarely): nothing of it is left (prepare
		// undoes every step), so one fresh attempt is safe.
		b.cfg.Logger.Warn("sandbox died during start; retrying once", "backend", b.name, "err", err)
		sb, err = b.prepare(ctx, d, image.RootFS(b.imagesDir(), name), name, tmpl.Limits.WithDefaults(), how)
	}
	if err != nil {
		return nil, err
	}
	return sb, nil
}

func (b *Backend) prepare(ctx context.Context, d *driver, rootfs, name string, lim sandbox.Limits, how boot) (_ *Sandbox, err error) {
	s := &Sandbox{b: b, d: d, id: newID(b.gvisor), image: name, limits: lim, agentFD: -1, oomFD: -1, oneShot: how.startsAtClaim(b.cfg.Pooled), boot: how}
	if how.netstack {
		s.d = d.netstack()
	}
	if b.gvisor && len(how.gpus) > 0 {
		s.d = s.d.withNVProxy()
	}
	s.dir = filepath.Join(b.run, "sb", s.id)
	defer func() {
		if err != nil {
			_ = s.Destroy(context.WithoutCancel(ctx))
			err = sandbox.Wrap(sandbox.BackendFailure, err, "%s: prepare %s", b.name, s.id)
		}
	}()
	step := func(name string, f func() error) error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	if err := step("scratch", s.makeScratch); err != nil {
		return nil, err
	}
	if err := step("uid range", func() (err error) {
		if b.weak == battery.SharedUID {
			s.slot = &slot{ids: b.rangeFor()} // every sandbox on one range, unlocked
			return nil
		}
		s.slot, err = acquireSlot(b.cfg.UIDBase, b.cfg.Slots)
		return err
	}); err != nil {
		return nil, err
	}
	s.defer1(func(context.Context) error { s.slot.release(); return nil })
	// The runtime's own teardown (after stop) overlaps removing the
	// scratch and the cgroups; the uid range is free once it is done.
	s.defer1(s.reap)
	s.defer1(func(context.Context) error { return removeScratch(s.dir) })
	if err := step("rootfs", func() error {
		ns, err := b.userns(s.slot.ids)
		if err != nil {
			return err
		}
		var fill func(data string) error
		if p := how.paused; p != nil {
			fill = func(data string) error {
				return loadUpper(ctx, p.rec.Path(pausedUpper), data, p.meta.IDs, s.slot.ids)
			}
		}
		if err := assembleRootfs(rootfs, s.dir, s.slot.ids, ns, lim.Disk, b.weak, fill); err != nil {
			return err
		}
		if rootWeakness(b.weak) {
			// Positive controls without a user namespace: the workspace
			// belongs to host root, as the sandbox's root now is.
			return os.Chown(filepath.Join(s.dir, "rootfs", workDir), 0, 0)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := step("network", func() error { return s.newNetwork(ctx) }); err != nil {
		return nil, err
	}
	if err := step("spec", s.writeSpec); err != nil {
		return nil, err
	}
	s.defer1(func(ctx context.Context) error { return removeCgroup(ctx, sandboxCgroup(s.id)) })
	if err := step("cgroup", s.makeCgroup); err != nil {
		return nil, err
	}
	s.defer1(s.stop)
	if s.oneShot {
		b.cfg.Logger.Debug("sandbox prepared", "backend", b.name, "id", s.id, "image", name, "runtime", d.name, "uid", s.slot.ids.HostUID, "one-shot", true)
		return s, nil
	}
	if err := step("run", func() error { return s.create(ctx) }); err != nil {
		return nil, err
	}
	if err := step("ready", func() error { return s.ready(ctx) }); err != nil {
		return nil, err
	}
	if (b.cfg.Pooled || how.capture) && how.from == nil && how.paused == nil {
		if err := step("warm-up", func() error { return s.warmUp(ctx) }); err != nil {
			return nil, err
		}
	}
	b.cfg.Logger.Debug("sandbox prepared", "backend", b.name, "id", s.id, "image", name, "runtime", d.name, "uid", s.slot.ids.HostUID)
	return s, nil
}

// makeCgroup creates the sandbox's own cgroup, the runtime's parent, and
// on v1 starts counting its OOM events.
func (s *Sandbox) makeCgroup() (err error) {
	if s.tenant, err = cgroup.New(sandboxCgroup(s.id), cgroup.Limits{}); err != nil {
		return err
	}
	// The template's limits, now: a claim within them writes nothing.
	if err := s.writeLimits(s.limits, 0); err != nil {
		return err
	}
	if s.tenant.V2Group() {
		return nil
	}
	if s.oomFD, err = watchOOM(memoryDir(s.tenant)); err != nil {
		return err
	}
	s.defer1(func(context.Context) error { return unix.Close(s.oomFD) })
	return nil
}

func (s *Sandbox) defer1(f func(context.Context) error) { s.cleanup = append(s.cleanup, f) }

// makeScratch creates the sandbox directory and takes its lock while holding
// the run directory's shared lock, so Reconcile never sees it unlocked.
func (s *Sandbox) makeScratch() error {
	g, err := hostlock.Wait(filepath.Join(s.b.run, "reconcile.lock"), hostlock.Shared)
	if err != nil {
		return err
	}
	defer g.Close()
	if err := os.Mkdir(s.dir, 0o711); err != nil {
		return err
	}
	s.lock, err = hostlock.Try(filepath.Join(s.dir, "lock"), hostlock.Exclusive)
	if err == nil && s.lock == nil {
		err = errors.New("fresh sandbox lock is held by someone else")
	}
	if err != nil {
		os.RemoveAll(s.dir)
		return err
	}
	return nil
}

func (s *Sandbox) writeSpec() error {
	spec, err := buildSpec(specParams{
		rootfs: filepath.Join(s.dir, "rootfs"), agent: s.b.agent, cgroups: "/" + poolCgroup(s.id),
		ids: s.slot.ids, limits: s.limits, gvisor: s.b.gvisor, ceil: s.b.ceil,
	})
	if err != nil {
		return err
	}
	if s.b.runner != "" {
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: runnerPath, Type: "bind", Source: s.b.runner, Options: []string{"rbind", "ro", "nosuid", "nodev"}})
		if err := s.wasmMountPoints(); err != nil {
			return err
		}
	}
	if s.net != nil {
		joinSlot(spec, s.netnsPath(), s.resolvPath())
	}
	gpuEdits(s.boot.gpus).apply(spec)
	if s.boot.identified() {
		if err := s.identityMounts(spec); err != nil {
			return err
		}
	}
	weakenSpec(spec, s.b.weak)
	if err := s.weakFiles(spec); err != nil {
		return err
	}
	s.spec = spec
	return writeConfig(s.dir, spec)
}

func writeConfig(dir string, spec *specs.Spec) error {
	js, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), js, 0o600)
}

// pipeConn is the host end of the agent's stdio. Close is idempotent: the
// client closes it when a call is abandoned, Destroy closes it again.
type pipeConn struct {
	io.Reader
	io.Writer
	r, w *os.File
	once sync.Once
	err  error
}

func (p *pipeConn) Close() error {
	p.once.Do(func() { p.err = errors.Join(p.w.Close(), p.r.Close()) })
	return p.err
}

// create starts "<runtime> run" with the agent's stdin/stdout as pipes; the
// container inherits them (no terminal, no console socket). Readiness is
// the agent's answer (ready), not the runtime's exit.
func (s *Sandbox) create(ctx context.Context) error {
	inR, inW, err := os.Pipe()
	if err != nil {
		return err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return err
	}
	// Buffered: a reply (length + body) then usually takes one read.
	conn := &pipeConn{Reader: bufio.NewReaderSize(outR, 64<<10), Writer: inW, r: outR, w: inW}
	s.client = agent.NewClient(conn)
	s.defer1(func(context.Context) error { return s.client.Close() })
	// The runtime's and the agent's stderr: a pipe drained into a capped
	// buffer, never a host file the sandbox could grow without bound.
	errR, errW, err := os.Pipe()
	if err != nil {
		return err
	}
	s.stderr = sandbox.NewSharedCapped(64 << 10)
	go func() {
		_, _ = io.Copy(s.stderr, errR)
		errR.Close()
	}()
	// The runtime stays in the foreground as the container's parent for
	// the sandbox's whole life: it reaps the container's init the moment
	// it dies and deletes the container itself, where a detached one
	// would leave the reaping to the host's init (runsc then polls it for
	// a second). It is not bound to ctx, which bounds only this call.
	cmd, release, err := s.runCommand(nil, nil)
	if err != nil {
		return err
	}
	defer release()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	if s.b.placer != nil {
		cpu, release := s.b.placer.acquire()
		s.defer1(func(context.Context) error { release(); return nil })
		err = startOnCPU(cmd, cpu)
	} else {
		err = cmd.Start()
	}
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		return fmt.Errorf("%s run: %w", s.d.name, err)
	}
	s.runtime = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(s.runtime)
	}()
	return nil
}

// runCommand is "<runtime> [global] run [flags] --bundle <dir> <id>" for
// the sandbox, in its own process group, with the fd the LeakedDirFD
// control passes; release closes that fd once the command has started.
func (s *Sandbox) runCommand(global, flags []string) (cmd *exec.Cmd, release func(), err error) {
	extra, leak, err := s.b.leakFD()
	if err != nil {
		return nil, nil, err
	}
	verb := []string{"run"}
	if img := s.boot.image(); img != "" {
		verb = []string{"restore", "--image-path", img}
		if s.d.restoreCheck {
			verb = append([]string{"--" + restoreCheckFeature + "=ignore"}, verb...)
		}
	}
	args := append(append(append(verb, flags...), extra...), "--bundle", s.dir, s.id)
	cmd = s.d.wrapped(append(global, s.d.argv(args...)...))
	release = func() {}
	if leak != nil {
		cmd.ExtraFiles = []*os.File{leak}
		release = func() { leak.Close() }
	}
	cmd.Dir = s.dir
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true}
	return cmd, release, nil
}

// startAgent starts the runtime with the agent as the container's init and
// waits for its answer: Prepare's last steps, or a one-shot Run's first.
func (s *Sandbox) startAgent(ctx context.Context) error {
	release, err := creatingCgroups()
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	defer release() // the agent is in its cgroup once ready answers
	if err := s.create(ctx); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return fmt.Errorf("ready: %w", err)
	}
	return nil
}

// ready waits until the agent answers a no-op job; for runc/crun it also
// records the agent's host pid (the only process in the pool cgroup).
func (s *Sandbox) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	job := agent.Job{ID: "ready"}
	thaw := s.boot.from != nil && s.b.weak != NoReexec
	if thaw {
		job = agent.Job{ID: "thaw", Reexec: true}
	}
	sent := time.Now()
	rep, err := s.client.Do(ctx, job)
	if err != nil {
		return fmt.Errorf("agent did not answer: %w: %s", err, tail(s.stderr.Bytes(), 800))
	}
	if rep.Error != "" {
		return fmt.Errorf("agent: %s", rep.Error)
	}
	if thaw {
		if err := s.checkThaw(rep.Thawed, sent, time.Now()); err != nil {
			return err
		}
	}
	if !s.b.gvisor {
		pids := cgroupProcs(poolCgroup(s.id))
		if len(pids) != 1 {
			return fmt.Errorf("want exactly the agent in %s, found pids %v", poolCgroup(s.id), pids)
		}
		s.agentPID = pids[0]
		fd, err := unix.PidfdOpen(s.agentPID, 0)
		if err != nil {
			return fmt.Errorf("pidfd of the agent: %w", err)
		}
		s.agentFD = fd // closed by stop, after its last use
	}
	g, err := adopt(poolCgroup(s.id))
	if err != nil {
		return err
	}
	s.leaf = g
	return nil
}

// warmUp runs the template's shell once, before any tenant (Config.Pooled).
// A template without /bin/sh still warms the exec path: the failed lookup
// is not an error; a broken agent is. Then the template's own warm-up, if
// it declares one (image.Warmup), which must succeed: what it leaves (files
// read into the Sentry's cache, say) is in every golden of the template.
func (s *Sandbox) warmUp(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	rep, err := s.client.Do(ctx, agent.Job{ID: "warm-up", Argv: []string{"/bin/sh", "-c", ":"}, Wall: 10 * time.Second, Output: 4096})
	if err != nil {
		return fmt.Errorf("agent did not answer: %w: %s", err, tail(s.stderr.Bytes(), 800))
	}
	s.b.cfg.Logger.Debug("warm-up", "backend", s.b.name, "id", s.id, "exit", rep.ExitCode, "err", rep.Error, "took", time.Since(start))
	argv, err := image.Warmup(s.b.imagesDir(), s.image)
	switch {
	case errors.Is(err, image.ErrNotFound):
		return nil // not a template of the store (the probe's empty root)
	case err != nil:
		return err
	case argv == nil:
		return nil
	}
	rep, err = s.client.Do(ctx, agent.Job{ID: "warm-up-template", Argv: argv, Env: []string{guestPATH},
		Dir: workDir, Wall: 20 * time.Second, Output: 4096})
	switch {
	case err != nil:
		return fmt.Errorf("template's warm-up: agent did not answer: %w: %s", err, tail(s.stderr.Bytes(), 800))
	case rep.ExitCode != 0 || rep.Error != "":
		return fmt.Errorf("template %s: warm-up %q exited %d: %s%s", s.image, argv, rep.ExitCode, rep.Error, tail(rep.Stderr, 512))
	}
	return nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

// ID is the sandbox's container id (and cgroup leaf name).
func (s *Sandbox) ID() string { return s.id }

// CheckImage implements sandbox.ImageChecker: name (empty: the default)
// must be a template built on this node.
func (b *Backend) CheckImage(name string) error {
	if name == "" {
		name = b.cfg.DefaultImage
	}
	return b.checkImage(name, "workload.image")
}

func (b *Backend) checkImage(name, field string) error {
	if !image.ValidName(name) {
		return sandbox.Errorf(sandbox.BadInput, field, "invalid image name %q", name)
	}
	if !image.Exists(b.imagesDir(), name) {
		// The fix is the operator's: tenants see only the Msg.
		return &sandbox.Error{Class: sandbox.BadInput, Field: field, Msg: fmt.Sprintf("no template %q on this node", name),
			Err: fmt.Errorf("build it: wovyr image build %s", name)}
	}
	return nil
}
