package main

import (
	"fmt"
	"os"
)

// rootHelp says what each backend needs root for. It is printed when a
// command that runs or prepares sandboxes starts without root, and in
// `wovyr --help`.
const rootHelp = `wovyr runs sandboxes as root; each backend needs it for:
  native     a uid and cgroups per sandbox, a size-limited workspace mount (CAP_SETUID, CAP_SYS_ADMIN)
  wasm       a size-limited tmpfs workspace for input files (CAP_SYS_ADMIN)
  container  namespaces, idmapped mounts, cgroups, an OCI runtime run as root (CAP_SYS_ADMIN, CAP_SETUID)
  gvisor     the same for runsc (never --rootless: its Sentry would then run as host uid 0)
  microvm    a cgroup and an unprivileged uid per QEMU, taps in egress slots (CAP_SYS_ADMIN, CAP_SETUID, CAP_NET_ADMIN)
Without root, run through a daemon that root started: wovyr run --remote http://HOST:PORT --token TOKEN -- ARGV...
`

// errNotRoot refuses a command that runs or prepares sandboxes when this
// process is not root. Without the check such a command fails on whatever
// it touches first — the state dir (“mkdir /nonexistent: permission
// denied” for a user without a home), a cgroup — which sends a newcomer the
// wrong way.
//
// # Why no unprivileged mode
//
// No backend here can keep all its promises without root: even wasm, whose
// isolation is in-process, enforces a workspace's disk quota with a tmpfs
// mount, and native's per-sandbox uid is the point of native. A partial
// mode whose certification says what it lacks is possible (for wasm
// without input files) but is not built yet.
type errNotRoot struct{ cmd string }

func (e errNotRoot) Error() string {
	return fmt.Sprintf("%s needs root (this is uid %d).\n%s", e.cmd, os.Geteuid(), rootHelp)
}

// needRoot returns errNotRoot unless this process is root.
func needRoot(cmd string) error {
	if os.Geteuid() == 0 {
		return nil
	}
	return errNotRoot{cmd}
}

// refuseUnlessRoot prints why g's command needs root and returns the exit
// code, or returns 0 when it may go on.
func refuseUnlessRoot(g *globals) int {
	if err := needRoot("wovyr " + g.cmd); err != nil {
		fmt.Fprintln(os.Stderr, "wovyr:", err)
		return exitBackendFailure
	}
	return 0
}
