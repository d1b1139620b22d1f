package wasm

import (
	"errors"
	"os"

	"github.com/wovyr/wovyr/sandbox"
)

// ErrNoWorkspace is the cause of the refusal of files in or out by an
// unprivileged backend (Config.Unprivileged). See
// docs/adr/0015-unprivileged-wasm.md.
var ErrNoWorkspace = errors.New("the wasm backend runs without root here, so it has no workspace (run wovyr as root, or through a daemon with --remote)")

// CheckWorkload implements sandbox.WorkloadChecker. A workdir that is one
// of Config.Preopens' guest paths is BadInput. Unprivileged, a workload
// with files in or out, or a workdir, is refused (policy-unenforceable, wrapping
// ErrNoWorkspace): its workspace's disk quota could not be enforced, and a
// limit is enforced or refused, never dropped. In either mode a workload
// that names an init export its module does not export as a function is
// BadInput (workload.init).
func (b *Backend) CheckWorkload(w *sandbox.Workload) error {
	if w.Init != "" { // a named init export must exist: a 400, not a failed record
		if _, err := initExportOf(w.Module, w.Init); err != nil {
			return err
		}
	}
	for _, p := range b.cfg.Preopens {
		if p.Guest == w.GuestWorkdir() {
			return sandbox.Errorf(sandbox.BadInput, "workload.workdir", "%s is a directory the operator grants read-only; the workspace needs a path of its own", p.Guest)
		}
	}
	if !b.cfg.Unprivileged {
		return nil
	}
	field := ""
	switch {
	case w.Workdir != "":
		field = "workload.workdir"
	case len(w.Files) > 0:
		field = "workload.files"
	case len(w.Collect) > 0:
		field = "workload.collect"
	default:
		return nil
	}
	return &sandbox.Error{Class: sandbox.Unenforceable, Field: field, Err: ErrNoWorkspace,
		Msg: "files in or out need a workspace with a disk quota (a tmpfs mount, which needs root)"}
}

// privilegeReason says why a configuration cannot run in this process, or
// "": tmpfs workspaces need root.
func (c Config) privilegeReason() string {
	if c.Unprivileged || os.Geteuid() == 0 {
		return ""
	}
	return "workspaces are tmpfs mounts, which need root (this process is not root; Config.Unprivileged runs without workspaces)"
}

// unprivilegedNA lists the rows whose probes need a writable workspace and
// so do not apply unprivileged, and why. The probes that need only a
// directory grant run on a read-only stand-in (probeEnv.workBackend).
func unprivilegedNA() map[int]string {
	const noWorkspace = "unprivileged mode has no workspace: an invocation with files in or out is refused as policy-unenforceable (TestUnprivilegedRefusesWorkspaceFiles), and the only directories a guest can have are the operator's read-only grants (probe 64), so "
	return map[int]string{
		14: noWorkspace + "the host collects nothing a guest could have linked",
		48: noWorkspace + "no invocation can leave anything for the next",
		52: noWorkspace + "a guest can write no bytes to the host's disk",
		53: noWorkspace + "a guest can create no files on the host",
	}
}
