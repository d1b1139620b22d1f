package oci

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/sandbox"
)

// Wasm workloads at container or gVisor strength: the agent runs the static
// wasm runner (`wovyr wasm-exec`, Config.WasmRunner), bind-mounted read-only
// at runnerPath, on the module the host placed in jobDir. The runner is the
// wasm backend's own code path (fuel, linear-memory limit, deadline, WASI
// preopen of the workspace at the workload's Workdir), and everything around it — cgroup
// limits, rlimits, namespaces, seccomp, gVisor — is the sandbox's as for a
// command.
const (
	runnerPath = RunnerPath
	jobDir     = "/.wovyr/job" // owned by the sandbox's root; the module and the runner's report
	moduleName = "module.wasm"
	reportName = "report.json"
	// maxRunnerMemoryMiB is the most linear memory wasm-exec accepts.
	maxRunnerMemoryMiB = 4096
	// runnerFDs are the descriptors the runner itself holds (stdio, its
	// compiled-module cache, Wasmtime's): they come out of the sandbox's
	// NoFile, whose hard limit the runner cannot raise.
	runnerFDs = 32
	// runnerGrace lets the runner report its own timeout before the
	// agent's deadline kills it.
	runnerGrace = time.Second
)

// RunnerPath is where every sandbox of a backend with a wasm runner has
// it (the static wovyr: `wasm-exec`, and `component-exec` for plugins run
// out of process).
const RunnerPath = "/.wovyr/wasm-exec"

// wasmMountPoints creates the runner's mount point and the job directory in
// the merged root, through an os.Root (the template is hostile input).
func (s *Sandbox) wasmMountPoints() error {
	if s.b.runner == "" {
		return nil
	}
	root, err := os.OpenRoot(filepath.Join(s.dir, "rootfs"))
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.WriteFile(strings.TrimPrefix(runnerPath, "/"), nil, 0o555); err != nil {
		return fmt.Errorf("template's %s: %w", runnerPath, err)
	}
	job := strings.TrimPrefix(jobDir, "/")
	if err := root.Mkdir(job, 0o700); err != nil {
		return fmt.Errorf("template's %s: %w", jobDir, err)
	}
	return root.Lchown(job, int(s.slot.ids.HostUID), int(s.slot.ids.HostGID))
}

// wasmJob places inv's module in the sandbox and returns the agent job that
// runs it through the runner under lim.
func (s *Sandbox) wasmJob(inv *sandbox.Invocation, lim sandbox.Limits, job *agent.Job) error {
	root, err := os.OpenRoot(filepath.Join(s.dir, "rootfs", jobDir))
	if err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "open %s", jobDir)
	}
	defer root.Close()
	// Root-owned and read-only: the sandbox's root cannot swap it.
	if err := root.WriteFile(moduleName, inv.Workload.Module, 0o444); err != nil {
		return sandbox.Wrap(sandbox.BackendFailure, err, "write the module")
	}
	mib := min(max(lim.Memory>>20, 1), maxRunnerMemoryMiB)
	argv := []string{runnerPath, "wasm-exec",
		"-memory-mib", strconv.FormatInt(mib, 10),
		"-wall", lim.Wall.String(),
		"-nofile", strconv.Itoa(max(lim.NoFile-runnerFDs, 1)),
		"-fuel", strconv.FormatUint(lim.Fuel, 10),
		"-work", workDir,
		"-workdir", inv.Workload.GuestWorkdir(),
		"-report", jobDir + "/" + reportName,
	}
	name := moduleName
	if len(inv.Workload.Argv) > 0 {
		name = inv.Workload.Argv[0]
	}
	argv = append(argv, "-argv0", name)
	if inv.Workload.Init != "" {
		argv = append(argv, "-init", inv.Workload.Init)
	}
	for _, e := range inv.Workload.Env {
		argv = append(argv, "-env", e)
	}
	argv = append(argv, jobDir+"/"+moduleName, "--")
	if len(inv.Workload.Argv) > 1 {
		argv = append(argv, inv.Workload.Argv[1:]...)
	}
	job.Argv, job.Env = argv, []string{}
	if job.Wall > 0 {
		job.Wall += runnerGrace
	}
	return nil
}

// wasmOutcome reads the runner's report: how the guest ended (exit, trap,
// fuel, its own deadline or memory limit). It is written inside the
// sandbox, so it is believed only about the workload's own outcome; usage,
// OOM kills and the host deadline stay host-measured. Without a report the
// runner's exit code stands.
func (s *Sandbox) wasmOutcome(res *sandbox.Result) {
	root, err := os.OpenRoot(filepath.Join(s.dir, "rootfs", jobDir))
	if err != nil {
		return
	}
	defer root.Close()
	f, err := root.OpenFile(reportName, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW, 0)
	if err != nil {
		return
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return
	}
	var rep sandbox.Result
	if json.Unmarshal(b, &rep) != nil {
		return
	}
	switch rep.Class {
	case sandbox.OK, sandbox.Timeout, sandbox.OutOfFuel, sandbox.OOM:
		res.Class, res.ExitCode, res.Signal = rep.Class, rep.ExitCode, rep.Signal
		if rep.Error != "" {
			res.Error = rep.Error
		}
	}
}
