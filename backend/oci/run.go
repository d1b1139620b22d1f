package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/cgroup"
	"github.com/wovyr/wovyr/sandbox"
)

// hostGrace is how long past the wall limit the host waits for the agent's
// own (timed-out) reply before it gives up on the sandbox.
const hostGrace = 3 * time.Second

// Run implements sandbox.Sandbox. It claims the sandbox for inv's tenant —
// cgroup, limits, rlimits — sends the job to the agent and classifies how it
// ended. A sandbox runs one invocation.
func (s *Sandbox) Run(ctx context.Context, inv *sandbox.Invocation) (*sandbox.Result, error) {
	if err := inv.Validate(); err != nil {
		return nil, err
	}
	if err := s.take(inv); err != nil {
		return nil, err
	}
	lim := s.b.weaken(inv.Limits.WithDefaults())
	res := &sandbox.Result{ID: inv.ID, Backend: s.b.name, Accel: s.d.accel}
	if res.ID == "" {
		res.ID = s.id
	}
	direct := s.oneShot && s.client == nil && s.direct(inv)
	if err := s.begin(ctx, inv, lim, !direct); err != nil {
		return nil, err
	}
	var err error
	var done bool
	if direct {
		done, err = s.runInit(ctx, inv, lim, res)
	} else {
		done, err = s.runJob(ctx, inv, lim, res)
	}
	if err != nil {
		return nil, err
	}
	if done {
		return res, nil
	}
	if len(inv.Workload.Collect) > 0 {
		files, err := s.collect(inv.Workload.Collect, lim)
		if err != nil {
			return nil, err
		}
		res.Files = files
	}
	return res, nil
}

// take checks that the sandbox can run inv (kind, network, image) and
// marks it used: a sandbox is claimed once, by Run or by Open.
func (s *Sandbox) take(inv *sandbox.Invocation) error {
	if !sandbox.Accepts(s.b, inv.Workload.Kind) {
		return sandbox.Errorf(sandbox.BadInput, "workload.kind", "%s backend does not run %s workloads (wasm needs Config.WasmRunner)", s.b.name, inv.Workload.Kind)
	}
	if !sameGPUs(inv.GPUs, s.boot.gpus) {
		return sandbox.Errorf(sandbox.BackendFailure, "", "%s: sandbox %s holds other GPU devices than the invocation was assigned", s.b.name, s.id)
	}
	if err := s.checkNetwork(inv.Policy.Network); err != nil {
		return err
	}
	if img := inv.Workload.Image; img != "" && img != s.image {
		return sandbox.Errorf(sandbox.BadInput, "workload.image", "sandbox was prepared for image %q, not %q", s.image, img)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used || s.gone {
		return sandbox.Errorf(sandbox.BackendFailure, "", "sandbox %s already ran an invocation or was destroyed", s.id)
	}
	s.used = true
	return nil
}

// begin claims the sandbox for inv's tenant (limits, network), first
// starting a one-shot sandbox's agent where needAgent: such a sandbox
// started nothing at Prepare (oneshot.go).
func (s *Sandbox) begin(ctx context.Context, inv *sandbox.Invocation, lim sandbox.Limits, needAgent bool) error {
	if s.boot.netstack {
		// runsc takes the slot's address when it starts: bind the slot
		// to the tenant's policy first (egress.go).
		if err := s.applyNetwork(ctx, inv); err != nil {
			return err
		}
	}
	if s.oneShot && s.client == nil && needAgent {
		// A one-shot sandbox started nothing at Prepare: this invocation
		// needs the agent (oneshot.go), so it starts now.
		if err := s.startAgent(ctx); err != nil {
			return sandbox.Wrap(sandbox.BackendFailure, err, "%s: start the agent of %s", s.b.name, s.id)
		}
	}
	if err := s.claim(inv, lim); err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "%s: claim %s for %s", s.b.name, s.id, inv.Tenant)
	}
	if s.boot.netstack {
		return nil
	}
	return s.applyNetwork(ctx, inv)
}

// runJob runs inv through the agent and fills in res. done reports a
// sandbox whose files are not to be collected (cancelled, or lost).
func (s *Sandbox) runJob(ctx context.Context, inv *sandbox.Invocation, lim sandbox.Limits, res *sandbox.Result) (done bool, err error) {
	job := agent.Job{
		ID: res.ID, Argv: inv.Workload.Argv, Env: s.workloadEnv(inv.Workload.Env), Dir: workDir,
		Stdin: inv.Workload.Stdin, Wall: lim.Wall, Output: lim.Output, Rlimits: s.rlimits(lim),
	}
	if s.b.weak == battery.NoDeadline {
		job.Wall = 0
	}
	job.TraceStopIsExit = s.b.weak == battery.TraceStopAsExit
	placed, err := s.placeFiles(inv.Workload.Files, &job)
	defer placed()
	if err != nil {
		return true, err
	}
	wasm := inv.Workload.Kind == sandbox.KindWasm
	if wasm {
		if err := s.wasmJob(inv, lim, &job); err != nil {
			return true, err
		}
	}
	return s.doJob(ctx, job, lim, res, wasm)
}

// doJob sends job to the agent under the host's own deadline and CPU
// watch and fills in res from the reply and the host's measurements. done
// reports a sandbox whose agent did not reply (cancelled, or lost): its
// connection is closed and no further job can reach it.
func (s *Sandbox) doJob(ctx context.Context, job agent.Job, lim sandbox.Limits, res *sandbox.Result, wasm bool) (done bool, err error) {
	hostCtx, cancel := context.WithTimeout(ctx, lim.Wall+hostGrace)
	defer cancel()
	cpuHit := s.watchCPU(hostCtx, cancel, lim.CPU)
	// A caller that watches the output live (sandbox.WithOutput) gets the
	// agent's pieces as they come; the result's output is then built from
	// them, held to the job's cap here (the agent is the tenant's
	// neighbour), so the stream and the record agree byte for byte.
	var live *sandbox.Collector
	var forward func(agent.Output)
	if fn := sandbox.OutputOf(ctx); fn != nil {
		job.Stream = true
		live = sandbox.NewCollector(fn, lim.Output)
		forward = func(o agent.Output) { live.Add(fdStream(o.Fd), o.Data) }
	}
	res.Timings.Started = time.Now()
	rep, err := s.client.DoStream(hostCtx, job, forward)
	res.Timings.Finished = time.Now()
	if live != nil && err == nil {
		var over bool
		rep.Stdout, rep.Stderr, over = live.Output()
		if over {
			s.b.cfg.Logger.Warn("agent broke the output cap", "backend", s.b.name, "id", s.id, "streamed", true)
			return true, sandbox.Errorf(sandbox.BackendFailure, "", "the sandbox's agent streamed more output than the %d-byte cap", lim.Output)
		}
	}
	// Usage and limits are judged from the host's own measurements: the
	// reply comes from inside the sandbox and is only believed about what
	// the workload controls anyway (exit status, output).
	st := s.hostUsage(res)
	hostWall := res.Usage.Wall
	switch {
	case limitHit(res, cpuHit(), st, lim):
		if res.Class == sandbox.OOM && err == nil {
			res.ExitCode, res.Signal = 0, "" // the agent's reply says how the job ended
		}
	case err == nil && (rep.TimedOut || hostWall > lim.Wall+hostGrace/2):
		res.Class, res.Error = sandbox.Timeout, sandbox.WallLimitMessage(lim.Wall)
	case err != nil && ctx.Err() != nil:
		res.Class, res.ExitCode, res.Signal, res.Error = sandbox.Killed, 137, "killed", "cancelled: "+ctx.Err().Error()
		return true, nil
	case err != nil && errors.Is(err, context.DeadlineExceeded):
		res.Class, res.ExitCode, res.Signal = sandbox.Timeout, 137, "killed"
		res.Error = sandbox.WallLimitMessage(lim.Wall)
		// The operator's clue (a dead agent, a stuck runtime), not the
		// tenant's: the runtime's stderr names host paths.
		s.b.cfg.Logger.Warn("sandbox did not answer", "backend", s.b.name, "id", s.id, "stderr", tail(s.stderr.Bytes(), 2048))
		return true, nil
	case err != nil:
		s.b.cfg.Logger.Warn("sandbox lost its agent", "backend", s.b.name, "id", s.id, "err", err, "stderr", tail(s.stderr.Bytes(), 2048))
		return true, sandbox.Wrap(sandbox.BackendFailure, err, "%s: sandbox %s lost its agent", s.b.name, s.id)
	}
	if err != nil {
		return true, nil
	}
	if rep.Unswept != "" {
		s.b.cfg.Logger.Warn("agent could not sweep", "backend", s.b.name, "id", s.id, "err", rep.Unswept)
		return true, sandbox.Errorf(sandbox.BackendFailure, "", "%s: sandbox %s may hold leftover processes: %s", s.b.name, s.id, rep.Unswept)
	}
	if res.ExitCode == 0 && res.Signal == "" {
		res.ExitCode, res.Signal = rep.ExitCode, signalName(rep.Signal)
	}
	if wasm && res.Class == sandbox.OK {
		s.wasmOutcome(res)
	}
	// The agent shares the sandbox with the tenant's code (a frame may
	// hold up to agent.MaxFrame).
	if err := sandbox.CheckReplyOutput("the sandbox's agent", rep.Stdout, rep.Stderr, lim.Output); err != nil {
		s.b.cfg.Logger.Warn("agent broke the output cap", "backend", s.b.name, "id", s.id, "err", err)
		return true, err
	}
	res.Stdout, res.Stderr = rep.Stdout, rep.Stderr
	res.StdoutTruncated, res.StderrTruncated = rep.StdoutTruncated, rep.StderrTruncated
	if rep.Error != "" && res.Class == sandbox.OK {
		// Could not start (e.g. command not found): report it as a shell would.
		var cut bool
		res.Stderr, cut = sandbox.AppendNotStarted(res.Stderr, rep.Error, lim.Output)
		res.StderrTruncated = res.StderrTruncated || cut
	}
	s.afterJob(ctx)
	return false, nil
}

// fdStream names the stream of an agent's Output frame (1 or 2; the client
// refuses any other).
func fdStream(fd int) sandbox.Stream {
	if fd == 2 {
		return sandbox.Stderr
	}
	return sandbox.Stdout
}

// workloadEnv is the environment a workload (or a session's exec) with
// env starts with: its own and nothing inherited (but under the
// InheritEnv positive control), GPU selectors naming only the sandbox's
// own devices.
func (s *Sandbox) workloadEnv(env []string) []string {
	env = sandbox.GPUEnv(env, s.boot.gpus) // a fresh, non-nil copy
	if s.b.weak == battery.InheritEnv {
		env = append(env, os.Environ()...)
	}
	return env
}

// notStarted is the stderr line of a job that could not start (command not
// found, …), as a shell would print it.
func notStarted(why string) string { return string(sandbox.NotStartedLine(why)) }

// limitHit classes res by the host-enforced limit the run hit, CPU time or
// memory, as killed (137); it reports whether there was one.
func limitHit(res *sandbox.Result, cpuHit bool, st cgroup.Stats, lim sandbox.Limits) bool {
	switch {
	case cpuHit:
		res.Class, res.Error = sandbox.Timeout, sandbox.CPULimitMessage(lim.CPU)
	case st.OOMKills > 0:
		res.Class, res.Error = sandbox.OOM, sandbox.MemoryLimitMessage(lim.Memory)
	default:
		return false
	}
	res.ExitCode, res.Signal = 137, "killed"
	return true
}

// hostUsage fills in res.Usage from the sandbox's cgroup and the host's
// clock (Timings), and returns the cgroup's counters since the claim.
func (s *Sandbox) hostUsage(res *sandbox.Result) cgroup.Stats {
	st := usageSince(s.tenant, s.base)
	st.OOMKills = max(st.OOMKills, oomEvents(s.oomFD))
	res.Usage = sandbox.Usage{Wall: res.Timings.Finished.Sub(res.Timings.Started), CPU: st.CPU, PeakMemory: st.PeakMemory}
	return st
}

func signalName(s string) string {
	if s == "" {
		return ""
	}
	return strings.ToLower(strings.TrimPrefix(s, "SIG"))
}

// claim gives the sandbox to inv's tenant: it writes inv's limits into the
// sandbox's own cgroup (made at Prepare, the runtime's parent) and applies
// the disk quota; the job carries its rlimits to the agent. No process
// moves: a cgroup v1 migration waits for an RCU grace period
// (cgroup_threadgroup_rwsem), 5–15 ms on a loaded host, where these writes
// take well under 1 ms.
func (s *Sandbox) claim(inv *sandbox.Invocation, lim sandbox.Limits) error {
	if s.b.weak == battery.KeepOrphans {
		if err := s.claimMoving(inv, lim); err != nil {
			return err
		}
	} else if err := s.setLimits(lim, inv.Resources.CPUMillis); err != nil {
		return err
	}
	if s.b.placer != nil && inv.Resources.CPUMillis > 1000 {
		if err := s.widen(); err != nil {
			return err
		}
	}
	// Usage counts from the claim on: the sandbox's start-up (runtime,
	// agent, Sentry) is not the tenant's.
	s.base = resetUsage(s.tenant)
	if lim.Disk != s.limits.Disk {
		if err := resizeUpper(s.dir, lim.Disk); err != nil {
			return fmt.Errorf("disk quota: %w", err)
		}
	}
	return nil
}

// widen lets a gVisor sandbox, born on one CPU (cpus.go), use all the
// backend's CPUs, for a claim that asks for more than one core.
func (s *Sandbox) widen() error {
	all := s.b.placer.all()
	for pass := 0; pass < 4; pass++ {
		n, err := setAffinity(cgroupProcs(poolCgroup(s.id)), all)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
	}
	return fmt.Errorf("cpu affinity: tasks of %s kept appearing pinned", s.id)
}

// claimMoving is the KeepOrphans positive control's claim: a separate group
// /wovyr/<tenant>/<id> the processes move into, so the control can then
// leave the runtime's cgroups behind (escapeRuntimeCgroups).
func (s *Sandbox) claimMoving(inv *sandbox.Invocation, lim sandbox.Limits) error {
	g, err := cgroup.New(cgroup.Prefix+"/"+inv.Tenant+"/"+s.id, cgroup.Limits{})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.tenant = g
	s.mu.Unlock()
	if err := setLimits(g, cgroup.Limits{Memory: memoryBudget(lim.Memory, s.b.gvisor), Pids: pidsBudget(lim.Pids, s.b.gvisor), CPUMillis: inv.Resources.CPUMillis}); err != nil {
		return err
	}
	s.leaf = g
	for _, pid := range cgroupProcs(poolCgroup(s.id)) {
		if err := g.Add(pid); err != nil && !errors.Is(err, unix.ESRCH) {
			return err
		}
	}
	escapeRuntimeCgroups(s.id, g.Path())
	return nil
}

// maxPids is the kernel's largest pid count (PID_MAX_LIMIT): no limit.
const maxPids = 1 << 22

// setLimits writes the invocation's limits into the sandbox's cgroup, and
// into the runtime's below it too where they exceed the template's shape
// that the runtime applied there.
func (s *Sandbox) setLimits(lim sandbox.Limits, cpuMillis int64) error {
	if err := s.writeLimits(lim, cpuMillis); err != nil {
		return err
	}
	if s.leaf != nil && s.exceedsTemplate(lim) {
		// The sandbox's cgroup alone limits: were the runtime's as high,
		// an OOM would happen there, out of sight of watchOOM.
		return setLimits(s.leaf, cgroup.Limits{Memory: math.MaxInt64, Pids: maxPids})
	}
	return nil
}

// exceedsTemplate reports limits above the template's shape, which the
// runtime's own cgroup enforces.
func (s *Sandbox) exceedsTemplate(lim sandbox.Limits) bool {
	return lim.Memory > s.limits.Memory || lim.Pids > s.limits.Pids
}

// writeLimits makes the sandbox's cgroup enforce lim and cpuMillis, writing
// nothing when it already does (Prepare wrote the template's).
func (s *Sandbox) writeLimits(lim sandbox.Limits, cpuMillis int64) error {
	cl := cgroup.Limits{Memory: memoryBudget(lim.Memory, s.b.gvisor), Pids: pidsBudget(lim.Pids, s.b.gvisor), CPUMillis: cpuMillis}
	if cl == s.written {
		return nil
	}
	if err := setLimits(s.tenant, cl); err != nil {
		return err
	}
	s.written = cl
	return nil
}

// rlimits are the per-invocation limits the agent sets on itself before the
// job, so they hold the same way under runc, crun and runsc.
func (s *Sandbox) rlimits(lim sandbox.Limits) []agent.Rlimit {
	if s.b.weak == battery.NoRlimits {
		return nil
	}
	rl := []agent.Rlimit{
		{Resource: unix.RLIMIT_NOFILE, Cur: uint64(lim.NoFile), Max: uint64(lim.NoFile)},
		{Resource: unix.RLIMIT_FSIZE, Cur: uint64(lim.Disk), Max: uint64(lim.Disk)},
		{Resource: unix.RLIMIT_CORE},
	}
	if s.b.weak != battery.NoPidsLimit {
		// The workload's own: the agent adds its threads, and a one-shot
		// workload is the only process.
		rl = append(rl, agent.Rlimit{Resource: unix.RLIMIT_NPROC, Cur: uint64(lim.Pids), Max: uint64(lim.Pids)})
	}
	return rl
}

// watchCPU enforces a CPU-time limit from the tenant cgroup's accounting:
// past it, the sandbox is killed through cancel. It returns whether it fired.
func (s *Sandbox) watchCPU(ctx context.Context, cancel context.CancelFunc, limit time.Duration) func() bool {
	fired := make(chan struct{})
	if limit <= 0 {
		return func() bool { return false }
	}
	go func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if usageSince(s.tenant, s.base).CPU >= limit {
					close(fired)
					_ = s.leaf.Kill(context.WithoutCancel(ctx))
					cancel()
					return
				}
			}
		}
	}()
	return func() bool {
		select {
		case <-fired:
			return true
		default:
			return false
		}
	}
}

// collect reads the named workspace files from the host side of the
// sandbox's root. os.Root refuses symlinks out of the workspace; only
// regular files are read, opened without blocking, and the total is capped.
func (s *Sandbox) collect(paths []string, lim sandbox.Limits) ([]sandbox.File, error) {
	root, err := os.OpenRoot(s.dir + "/rootfs" + workDir)
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "open workspace")
	}
	defer root.Close()
	var out []sandbox.File
	total := int64(0)
	for _, p := range paths {
		f, err := root.OpenFile(p, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW, 0)
		if s.b.weak == FollowLinks {
			f, err = os.Open(filepath.Join(s.dir, "rootfs", workDir, p)) // positive control only
		}
		if err != nil {
			continue // absent or escaping: not collected
		}
		fi, err := f.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			f.Close()
			continue
		}
		b, err := io.ReadAll(io.LimitReader(f, sandbox.MaxFileBytes-total+1))
		f.Close()
		if err != nil {
			return nil, sandbox.Wrap(sandbox.BackendFailure, err, "collect %s", p)
		}
		total += int64(len(b))
		if total > sandbox.MaxFileBytes {
			return nil, sandbox.Errorf(sandbox.BadInput, "workload.collect", "collected files exceed %d bytes", sandbox.MaxFileBytes)
		}
		out = append(out, sandbox.File{Path: p, Data: b, Mode: uint32(fi.Mode().Perm())})
	}
	return out, nil
}

// weaken lifts the limit a positive control's weakness names; for b without
// a weakness it returns lim unchanged.
func (b *Backend) weaken(lim sandbox.Limits) sandbox.Limits {
	switch b.weak {
	case battery.NoPidsLimit:
		lim.Pids = 1 << 20
	case battery.NoMemoryLimit:
		lim.Memory = 1 << 40
	case battery.NoDiskQuota:
		lim.Disk = 1 << 40
	case battery.NoDeadline:
		lim.Wall = time.Hour
	case battery.NoOutputCap:
		lim.Output = sandbox.MaxOutputBytes
	}
	return lim
}

// escapeRuntimeCgroups moves the pool cgroup's processes to the root of
// every hierarchy the tenant group does not cover (KeepOrphans control).
func escapeRuntimeCgroups(id, tenant string) {
	pids := cgroupProcs(poolCgroup(id))
	for _, h := range hierarchies() {
		if _, err := os.Stat(filepath.Join(h, tenant)); err == nil {
			continue
		}
		for _, pid := range pids {
			_ = os.WriteFile(filepath.Join(h, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
		}
	}
}
