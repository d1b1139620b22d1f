package sandbox

// The environment a command workload sees is the same on every tier that
// gives it a root filesystem of its own (container, gvisor, microvm), and a
// wasm module's preopen has the same name (issue #25: the workspace was
// /workspace on container and gVisor but /work on microVM and wasm, the
// hostname "wovyr" vs "(none)"): a platform picks the tier by trust, so a
// tool must not notice when its tenant's trust changes. Native runs a host
// process and keeps the host's names; docs/API.md lists what still differs
// by tier (CPU count, kernel) and why.
const (
	// WorkspaceDir is the workload's working directory, where its input
	// files are written and its collected files are read.
	WorkspaceDir = "/workspace"
	// Hostname is the sandbox's host name (its own UTS namespace or VM).
	Hostname = "wovyr"
	// TmpMode is /tmp's mode: world-writable with the sticky bit, as every
	// Unix tool expects.
	TmpMode = 0o1777
)
