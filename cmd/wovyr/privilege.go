package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/wovyr/wovyr/sandbox"
)

// rootNeed is what one backend needs root for.
type rootNeed struct {
	strength sandbox.Strength
	what     string // short, for "unavailable: needs root: …"
	caps     string
}

// rootNeeds lists every backend, weakest first. Without root only wasm is
// offered (without workspaces); the others stand in as rootOnly.
var rootNeeds = []rootNeed{
	{sandbox.Native, "a uid and cgroups per sandbox, a size-limited workspace mount", "CAP_SETUID, CAP_SYS_ADMIN"},
	{sandbox.Wasm, "a size-limited tmpfs workspace for files in and out", "CAP_SYS_ADMIN"},
	{sandbox.Container, "namespaces, idmapped mounts, cgroups, an OCI runtime run as root", "CAP_SYS_ADMIN, CAP_SETUID"},
	{sandbox.GVisor, "runsc run as root, with those namespaces and mounts (never --rootless: its Sentry would then run as host uid 0)", "CAP_SYS_ADMIN, CAP_SETUID"},
	{sandbox.MicroVM, "a cgroup and an unprivileged uid per QEMU, taps in egress slots", "CAP_SYS_ADMIN, CAP_SETUID, CAP_NET_ADMIN"},
}

// rootHelp says what each backend needs root for and what runs without
// it. It is printed when a command that needs root starts without it, and
// in `wovyr --help`.
func rootHelp() string {
	var b strings.Builder
	b.WriteString("wovyr runs sandboxes as root; each backend needs it for:\n")
	for _, n := range rootNeeds {
		fmt.Fprintf(&b, "  %-10s %s (%s)\n", n.strength, n.what, n.caps)
	}
	b.WriteString(`Without root, run, certify and backends offer the wasm backend alone, without files in or out
(--file, --collect): certify it once with wovyr certify --backend wasm, then wovyr run --wasm MODULE.wasm.
Its state is then in $XDG_STATE_HOME/wovyr, else ~/.local/state/wovyr (or --state-dir DIR).
For anything else without root, run through a daemon that root started: wovyr run --remote http://HOST:PORT --token TOKEN -- ARGV...
`)
	return b.String()
}

// errNotRoot refuses what needs root when this process is not root.
// Without the check such a command fails on whatever it touches first — a
// cgroup, a mount — which sends a newcomer the wrong way.
//
// # Why only wasm runs unprivileged
//
// The other backends' isolation is root's to give: native's per-sandbox
// uid and cgroups, the OCI runtimes' namespaces and idmapped mounts,
// QEMU's cgroup and uid. Wasm's isolation is in-process, and what it loses
// without root is the size-limited workspace (a tmpfs mount): so it runs
// without one, refusing files in or out rather than dropping their disk
// quota, and certifies as that mode (docs/adr/0015-unprivileged-wasm.md).
type errNotRoot struct{ what string }

func (e errNotRoot) Error() string {
	return fmt.Sprintf("%s needs root (this is uid %d).\n%s", e.what, os.Geteuid(), strings.TrimSuffix(rootHelp(), "\n"))
}

// unprivileged reports whether this process runs without root: only the
// wasm backend, in its unprivileged mode, is then offered.
func unprivileged() bool { return os.Geteuid() != 0 }

// needRoot returns errNotRoot for what unless this process is root.
func needRoot(what string) error {
	if !unprivileged() {
		return nil
	}
	return errNotRoot{what}
}

// refuseUnlessRoot prints why what needs root and returns the exit code,
// or returns 0 when it may go on.
func refuseUnlessRoot(what string) int {
	if err := needRoot(what); err != nil {
		fmt.Fprintln(os.Stderr, "wovyr:", err)
		return exitBackendFailure
	}
	return 0
}

// rootOnly stands in, without root, for a backend that needs it: it is
// unavailable, says what for, and prepares nothing, so that `wovyr
// backends` and a refused selection name it with that reason.
type rootOnly struct {
	need  rootNeed
	kinds []sandbox.WorkloadKind
}

// rootOnlyBackends are the stand-ins for every backend but wasm; the
// container and gVisor backends take wasm workloads when the runner is
// there (as oci.Backend.Kinds says).
func rootOnlyBackends() []sandbox.Backend {
	var out []sandbox.Backend
	for _, n := range rootNeeds {
		kinds := []sandbox.WorkloadKind{sandbox.KindCommand}
		switch n.strength {
		case sandbox.Wasm:
			continue
		case sandbox.Container, sandbox.GVisor:
			if wasmRunner() != "" {
				kinds = append(kinds, sandbox.KindWasm)
			}
		}
		out = append(out, rootOnly{need: n, kinds: kinds})
	}
	return out
}

func (r rootOnly) Name() string                  { return r.need.strength.String() }
func (r rootOnly) Strength() sandbox.Strength    { return r.need.strength }
func (r rootOnly) Kinds() []sandbox.WorkloadKind { return r.kinds }

// Probe implements sandbox.Backend: unavailable, needs root.
func (r rootOnly) Probe(context.Context) sandbox.Capability {
	return sandbox.Capability{Reason: "needs root: " + r.need.what}
}

// Prepare implements sandbox.Backend; selection never gets here (the
// backend is unavailable).
func (r rootOnly) Prepare(context.Context, sandbox.Template) (sandbox.Sandbox, error) {
	return nil, sandbox.Errorf(sandbox.BackendFailure, "", "%s needs root: %s", r.Name(), r.need.what)
}
