package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/sandbox"
)

// One-shot sandboxes (Config.Pooled off: `wovyr run`, certification, a
// cold start) run their invocation as the container's init, the way the
// raw runtime does: Prepare builds the bundle, root filesystem and cgroup
// and starts nothing; Run writes the workload into the spec's process and
// runs "<runtime> run" with the workload's stdio as its own. Starting the
// agent first would add its start, a job round trip and a second exec
// (under gVisor a fork and exec inside the Sentry, 10–25 ms) to every cold
// invocation, and an agent to kill at the end.
//
// The spec is the one Prepare wrote but for the process (argv, env, the
// invocation's rlimits), so the isolation is the same and so is its
// certification. What differs, as with any "runsc run" or "docker run
// --init":
//   - under runc/crun the container's init is wovyr-guest's "job", the
//     job's parent, which detaches from a job that made it its tracer
//     (PTRACE_TRACEME) and returns the job's exit status (underLeader);
//     under gVisor the workload is PID 1 of its pid namespace;
//   - a death by signal n reads as exit status 128+n, with no signal name
//     (the runtime's exit status is all the host sees) unless the host
//     killed it (timeout, cancel, OOM);
//   - its usage is counted from the moment the runtime writes its pid file
//     (the container exists; under gVisor the Sentry has booted), and its
//     wall-clock limit runs from then;
//   - argv[0] without a slash is resolved by the host in the sandbox's
//     root (agent.LookPathIn, as the agent would); with no PATH in the
//     environment the resolved path is what the runtime executes.
//
// Invocations that need the agent — files to write first, wasm, the
// KeepOrphans and ExecHealthCheck positive controls — start it at Run
// instead, and then run as in a pooled sandbox.

// initPidFile and runtimeLog are the runtime's pid file and error log in the
// sandbox's directory.
const (
	initPidFile = "init.pid"
	runtimeLog  = "runtime.log"
)

// startLimit bounds the runtime's start of a one-shot container (up to its
// pid file): past it the sandbox is a backend failure, not the tenant's.
const startLimit = 30 * time.Second

// killLimit is how long a killed container's runtime may take to exit
// before Run gives up on it.
const killLimit = 30 * time.Second

// pidPoll is how often Run looks for the runtime's pid file.
const pidPoll = time.Millisecond

// direct reports whether inv can run as the container's init.
func (s *Sandbox) direct(inv *sandbox.Invocation) bool {
	return inv.Workload.Kind != sandbox.KindWasm && len(inv.Workload.Files) == 0 &&
		s.b.weak != battery.KeepOrphans && s.b.weak != ExecHealthCheck
}

// initSpec is the sandbox's spec running argv with env under lim.
func (s *Sandbox) initSpec(argv, env []string, lim sandbox.Limits) *specs.Spec {
	sp := *s.spec
	p := *sp.Process
	p.Args, p.Env, p.Cwd = argv, env, workDir
	if rl := s.rlimits(lim); rl != nil {
		p.Rlimits = slices.Clone(p.Rlimits)
		for _, r := range rl {
			if r.Resource == unix.RLIMIT_NPROC && s.underLeader() {
				// Room for the leader's parent's threads, which it adds
				// to the job's own budget (agent.RunLeader).
				r.Cur, r.Max = r.Cur+agent.ThreadReserve, r.Max+agent.ThreadReserve
			}
			i := slices.IndexFunc(p.Rlimits, func(x specs.POSIXRlimit) bool { return x.Type == rlimitNames[r.Resource] })
			if i < 0 {
				p.Rlimits = append(p.Rlimits, specs.POSIXRlimit{Type: rlimitNames[r.Resource]})
				i = len(p.Rlimits) - 1
			}
			p.Rlimits[i].Soft, p.Rlimits[i].Hard = r.Cur, r.Max
		}
	}
	sp.Process = &p
	if s.exceedsTemplate(lim) {
		// As setLimits does for a started sandbox: the sandbox's own
		// cgroup alone limits, so an OOM is seen where it is watched.
		l := *sp.Linux
		r := *l.Resources
		r.Memory = &specs.LinuxMemory{Limit: int64Ptr(math.MaxInt64), Swap: int64Ptr(math.MaxInt64)}
		r.Pids = &specs.LinuxPids{Limit: int64Ptr(maxPids)}
		l.Resources, sp.Linux = &r, &l
	}
	return &sp
}

// underLeader reports whether a one-shot job runs under wovyr-guest's
// "job" rather than as the container's init: under runc and crun, whose
// init's parent is the runtime, which a job calling PTRACE_TRACEME would
// make its tracer and which never resumes a stopped tracee (issue #25;
// agent.RunLeader). Under gVisor the Sentry is the init's parent and no
// tracer, and one more exec there costs 10–25 ms.
func (s *Sandbox) underLeader() bool { return !s.b.gvisor }

// leaderArgv is the spec's argv that runs prog with argv under
// wovyr-guest's "job", with the job's own process budget.
func (s *Sandbox) leaderArgv(prog string, argv []string, lim sandbox.Limits) []string {
	out := []string{agentPath, "job"}
	if slices.ContainsFunc(s.rlimits(lim), func(r agent.Rlimit) bool { return r.Resource == unix.RLIMIT_NPROC }) {
		out = append(out, "--nproc="+strconv.Itoa(lim.Pids))
	}
	if s.b.weak == battery.TraceStopAsExit {
		out = append(out, "--trace-stop-is-exit")
	}
	return append(append(out, "--", prog), argv...)
}

// mountSources are the spec's mounts by destination, as agent.LookPathIn
// takes them: a bind's host source, "" for a filesystem that starts empty.
func (s *Sandbox) mountSources() map[string]string {
	m := make(map[string]string, len(s.spec.Mounts))
	for _, mt := range s.spec.Mounts {
		src := ""
		if mt.Type == "bind" {
			src = mt.Source
		}
		m[mt.Destination] = src
	}
	return m
}

var rlimitNames = map[int]string{
	unix.RLIMIT_NOFILE: "RLIMIT_NOFILE", unix.RLIMIT_FSIZE: "RLIMIT_FSIZE",
	unix.RLIMIT_CORE: "RLIMIT_CORE", unix.RLIMIT_NPROC: "RLIMIT_NPROC",
}

// runInit runs inv as the container's init and fills in res; done reports
// a result whose files are not to be collected (cancelled).
func (s *Sandbox) runInit(ctx context.Context, inv *sandbox.Invocation, lim sandbox.Limits, res *sandbox.Result) (done bool, err error) {
	env := s.workloadEnv(inv.Workload.Env)
	argv := slices.Clone(inv.Workload.Argv)
	res.Timings.Started = time.Now()
	prog, err := agent.LookPathIn(filepath.Join(s.dir, "rootfs"), workDir, argv[0], env, s.mountSources())
	if err != nil {
		res.ExitCode, res.Stdout, res.Stderr = 127, []byte{}, []byte(notStarted(err.Error()))
		res.Timings.Finished = time.Now()
		return false, nil
	}
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
		argv[0] = prog // the runtime would search its own default PATH
	}
	if s.underLeader() {
		argv = s.leaderArgv(prog, argv, lim)
	}
	if err := writeConfig(s.dir, s.initSpec(argv, env, lim)); err != nil {
		return true, sandbox.Wrap(sandbox.BackendFailure, err, "%s: spec of %s", s.b.name, s.id)
	}

	pidPath := filepath.Join(s.dir, initPidFile)
	cmd, release, err := s.runCommand([]string{s.d.logFlag(filepath.Join(s.dir, runtimeLog))}, []string{"--pid-file", pidPath})
	if err != nil {
		return true, sandbox.Wrap(sandbox.BackendFailure, err, "%s: %s", s.b.name, s.id)
	}
	defer release()
	stdout, stderr := &sandbox.Capped{Limit: lim.Output}, &sandbox.Capped{Limit: lim.Output}
	if fn := sandbox.OutputOf(ctx); fn != nil {
		// The runtime's stdio is the workload's: what each cap keeps is
		// streamed as it is kept (os/exec's two copy goroutines meet in
		// the collector, which keeps fn's calls apart).
		live := sandbox.NewCollector(fn, lim.Output)
		stdout.Emit = func(p []byte) { live.Add(sandbox.Stdout, p) }
		stderr.Emit = func(p []byte) { live.Add(sandbox.Stderr, p) }
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if len(inv.Workload.Stdin) > 0 {
		cmd.Stdin = bytes.NewReader(inv.Workload.Stdin)
	}
	// Once the runtime has exited, its stdio closes with the container's
	// last process; this bounds the wait should something else hold it.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return true, sandbox.Wrap(sandbox.BackendFailure, err, "%s run", s.d.name)
	}
	exited := make(chan error, 1)
	s.runtime = make(chan struct{})
	go func() {
		exited <- cmd.Wait()
		close(s.runtime)
	}()

	// Until the pid file, the runtime is starting the container; from it
	// on, the workload's clock runs.
	hostCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := hostCtx.Done()
	cpuHit := func() bool { return false }
	clock := time.NewTimer(startLimit)
	defer clock.Stop()
	// The pid file is polled for: an inotify instance would count against
	// host root's (fs.inotify.max_user_instances), which sandboxes share
	// through their user namespaces' accounting, and freeing one waits
	// for an SRCU grace period.
	poll := time.NewTicker(pidPoll)
	defer poll.Stop()
	pidFile := poll.C
	running := false
	var why string // why the host killed the container, if it did
	var retry, giveUp <-chan time.Time
	var runErr, adoptErr error
	kill := func(reason string) {
		if why == "" {
			why = reason
		}
		retry = s.killInit(cmd.Process.Pid)
		if giveUp == nil {
			giveUp = time.After(killLimit)
		}
	}
wait:
	for {
		select {
		case <-pidFile:
			if _, err := os.Stat(pidPath); err != nil {
				continue
			}
			poll.Stop()
			pidFile, running = nil, true
			res.Timings.Started = time.Now()
			s.base = resetUsage(s.tenant)
			switch g, err := adopt(poolCgroup(s.id)); {
			case err == nil:
				s.leaf = g
				cpuHit = s.watchCPU(hostCtx, cancel, lim.CPU)
			case errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) || treeEmpty(poolCgroup(s.id)):
				// Already over: the runtime is removing its cgroup.
			default:
				adoptErr = err
				kill("adopt") // its CPU limit could not be enforced
				continue
			}
			clock.Reset(lim.Wall)
		case runErr = <-exited:
			break wait
		case <-clock.C:
			if running {
				kill("wall")
			} else {
				kill("start")
			}
		case <-stop:
			stop = nil
			kill("cancel") // the caller's, or watchCPU's (cpuHit says which)
		case <-retry:
			kill("") // until the runtime is gone
		case <-giveUp:
			// Destroy goes on trying; the run is over.
			return true, sandbox.Errorf(sandbox.BackendFailure, "", "%s: %s run %s outlived its kill by %s", s.b.name, s.d.name, s.id, killLimit)
		}
	}
	res.Timings.Finished = time.Now()
	if !running {
		// Started and gone between two polls.
		_, err := os.Stat(pidPath)
		running = err == nil
	}
	st := s.hostUsage(res)
	res.Stdout, res.Stderr = stdout.Bytes(), stderr.Bytes()
	res.StdoutTruncated, res.StderrTruncated = stdout.Truncated, stderr.Truncated
	code := -1
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
	}
	rtErr := ""
	if code != 0 {
		rtErr = runtimeError(filepath.Join(s.dir, runtimeLog))
	}
	switch {
	case limitHit(res, cpuHit(), st, lim):
	case why == "wall":
		res.Class, res.ExitCode, res.Signal = sandbox.Timeout, 137, "killed"
		res.Error = sandbox.WallLimitMessage(lim.Wall)
	case why == "cancel":
		res.Class, res.ExitCode, res.Signal, res.Error = sandbox.Killed, 137, "killed", "cancelled: "+context.Cause(ctx).Error()
		return true, nil
	case why == "adopt":
		return true, sandbox.Wrap(sandbox.BackendFailure, adoptErr, "%s: the cgroup of %s", s.b.name, s.id)
	case why == "start":
		return true, sandbox.Errorf(sandbox.BackendFailure, "", "%s: %s did not start %s within %s", s.b.name, s.d.name, s.id, startLimit)
	case rtErr != "" && !running:
		// No pid file: the runtime failed before the container existed.
		return true, sandbox.Errorf(sandbox.BackendFailure, "", "%s: %s run %s: %s", s.b.name, s.d.name, s.id, rtErr)
	case rtErr != "":
		// The container existed, the exec failed: the workload's, as the
		// agent reports it ("could not start"). Its stderr is the
		// runtime's message, so the message alone replaces it.
		res.ExitCode, res.Stderr, res.StderrTruncated = 127, []byte(notStarted(rtErr)), false
	case runErr != nil && code < 0:
		return true, sandbox.Wrap(sandbox.BackendFailure, runErr, "%s: %s run %s", s.b.name, s.d.name, s.id)
	default:
		res.ExitCode = code
	}
	return false, nil
}

// killInit kills the container — every process in the runtime's cgroup,
// or the runtime itself while it has not made one yet — and returns when
// to try again should the runtime still be there.
func (s *Sandbox) killInit(runtimePID int) <-chan time.Time {
	if !s.killTree() {
		_ = unix.Kill(-runtimePID, unix.SIGKILL)
	}
	return time.After(50 * time.Millisecond)
}

// logFlag is the global flag that sends the runtime's own errors to path
// (they also go to its stderr, which is the workload's).
func (d *driver) logFlag(path string) string {
	if d.name == "crun" {
		return "--log=file:" + path
	}
	return "--log=" + path
}

// runtimeError is the first error in the runtime's log at path, "" if none:
// crun writes plain lines, runc and runsc JSON objects with a level.
func runtimeError(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 64<<10))
	for _, line := range bytes.Split(b, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var e struct{ Msg, Level string }
		if line[0] == '{' && json.Unmarshal(line, &e) == nil {
			if e.Level == "error" || e.Level == "fatal" || e.Level == "panic" {
				return e.Msg
			}
			continue
		}
		return string(line)
	}
	return ""
}
