// Package tierparity holds the tier-parity test (issue #25): one scripted,
// python-free POSIX workload run on every tier this node has — container,
// gVisor and microVM, each as a one-shot sandbox and as a pooled (warm)
// one — over the same template, comparing a fixed set of facts (workspace
// path, hostname, /tmp's mode, a loopback server answering, the listing of
// / with its symlinks, exit code and output). A platform picks the tier by
// trust, not by the tool, so a tool must not notice when its tenant's trust
// changes. The differences that are intended (CPU count, kernel) are listed
// in docs/API.md and are not among the facts.
//
// The package has no code of its own: it imports the backends, which never
// import each other.
package tierparity
