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

// hostPlaced is the size from which an invocation's file goes into the
// sandbox through its job directory, written here, rather than through the
// agent's protocol: 60 MB as JSON into a gVisor sandbox took 2.5 s, as a
// file the agent copies inside, a few tens of milliseconds.
const hostPlaced = 1 << 20

// placeFiles puts files in job: small ones as data, large ones written
// into the job directory (jobRoot) for the agent to move into the
// workspace. The returned func removes what it wrote; call it when the job
// is over.
func (s *Sandbox) placeFiles(files []sandbox.File, job *agent.Job) (func(), error) {
	var root *os.Root
	var written []string
	done := func() {
		for _, name := range written {
			root.Remove(name)
		}
		if root != nil {
			root.Close()
		}
	}
	for i, f := range files {
		af := agent.File{Path: f.Path, Data: f.Data, Mode: f.Mode}
		if len(f.Data) >= hostPlaced && s.b.runner != "" { // the job directory exists
			if root == nil {
				var err error
				if root, err = s.jobRoot(); err != nil {
					return done, sandbox.Wrap(sandbox.BackendFailure, err, "open %s", jobDir)
				}
			}
			name := fmt.Sprintf("in-%s-%d", job.ID, i)
			if err := s.writeNew(root, name, f); err != nil {
				return done, sandbox.Wrap(sandbox.BackendFailure, err, "place file %s", f.Path)
			}
			written = append(written, name)
			af.Data, af.From = nil, jobDir+"/"+name
		}
		job.Files = append(job.Files, af)
	}
	return done, nil
}

// writeNew writes file's data to a new file name in root, replacing
// nothing, owned by the sandbox's root with file's mode, as the agent
// would have written it.
func (s *Sandbox) writeNew(root *os.Root, name string, file sandbox.File) error {
	mode := os.FileMode(file.Mode)
	if mode == 0 {
		mode = 0o644
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(file.Data)
	if err == nil {
		err = f.Chown(int(s.slot.ids.HostUID), int(s.slot.ids.HostGID))
	}
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// jobRoot opens the job directory through the sandbox's rootfs, so that a
// link at its path (the template's, or a session's command's) leads
// nowhere outside the rootfs.
func (s *Sandbox) jobRoot() (*os.Root, error) {
	rootfs, err := os.OpenRoot(filepath.Join(s.dir, "rootfs"))
	if err != nil {
		return nil, err
	}
	defer rootfs.Close()
	return rootfs.OpenRoot(strings.TrimPrefix(jobDir, "/"))
}

// wasmJob places inv's module in the sandbox and returns the agent job that
// runs it through the runner under lim.
func (s *Sandbox) wasmJob(inv *sandbox.Invocation, lim sandbox.Limits, job *agent.Job) error {
	root, err := s.jobRoot()
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
	root, err := s.jobRoot()
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
