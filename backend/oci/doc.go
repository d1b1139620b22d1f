// Package oci runs wovyr's container and gvisor backends: one code path that
// generates an OCI bundle (root filesystem + runtime-spec config) and hands
// it to an OCI runtime — crun (runc as fallback) for "container", runsc for
// "gvisor".
//
// A sandbox is an OCI bundle over an otherwise unchanged template, into
// which wovyr's static job agent (package agent, binary wovyr-guest) is
// bind-mounted read-only. Prepare makes the sandbox's own cgroup
// /wovyr/_pool/<id>, the runtime's parent (…/<id>/runtime, the template's
// limits). A sandbox runs one invocation and is then destroyed.
//
// Sandboxes for a warm pool (Config.Pooled, the daemon's) are started
// containers whose init is the agent, started tenant-neutrally at Prepare;
// Run claims one for a tenant: it writes that invocation's limits into
// /wovyr/_pool/<id> and sends the job, with its rlimits, over the agent's
// stdio pipes. No process changes cgroup at claim (a cgroup v1 migration
// waits for an RCU grace period); the tenant is the sandbox's, recorded
// with its result, and its usage is read from its own cgroup, which
// outlives the runtime's. Their Prepare is slower for a faster claim: the
// agent runs the template's shell once before any tenant, and each gVisor
// sandbox is born on one host CPU, so that the Sentry's hand-offs with its
// stubs never wake a halted CPU (cpus.go); a claim for more than one core
// widens it again.
//
// Other sandboxes are one-shot (oneshot.go): Prepare starts nothing, and
// Run starts the runtime with the workload itself as the container's init,
// as "crun run" would — no agent start, no second exec, nothing to kill
// afterwards. Invocations that need the agent (files to write, wasm) start
// it at Run instead.
//
// Wasm workloads run through the static wasm runner (`wovyr wasm-exec`,
// Config.WasmRunner), bind-mounted read-only like the agent: the wasm
// backend's own limits (fuel, linear memory, deadline) inside the
// container's or gVisor's (wasm.go).
//
// Hardening, in the spec: every namespace including user (sandbox root is an
// unprivileged host uid range, distinct per live sandbox, see slots.go) and
// cgroup; no capabilities; no_new_privileges; moby's default seccomp profile,
// tightened; masked and read-only kernel paths; rlimits; a network namespace
// with loopback only, or the sandbox's egress slot. The root filesystem is the read-only template,
// idmapped into the sandbox's range as an overlay lower layer, with a
// throw-away upper layer on a size-limited tmpfs (package idmap).
//
// # What it refuses
//
// Allowlists on a backend without Config.Network (a container's sandboxes
// then have a loopback-only netns, gVisor's --network=none; with it, each
// container and each gVisor sandbox prepared for an allowlist sits in an
// egress slot, see egress.go); wasm
// workloads when no wasm runner is configured (Kinds is then only
// KindCommand); runsc's kvm platform (it spins on these hosts) and runsc
// --rootless as root (the Sentry would run as host root).
//
// # The agent is inside the boundary
//
// The workload runs as the agent's uid, so nothing the agent reports is
// trusted for accounting: usage, OOM and timeouts are judged from host-side
// measurements (tenant cgroup, host clock). The agent makes itself
// non-dumpable (agent.Harden), so under runc/crun a workload cannot open
// /proc/1/fd/* to read the job stream or forge reply frames; runsc does not
// apply dumpability to procfs fd access, so under gVisor a workload can
// forge its own reply — affecting only its own exit status and output, as
// the sandbox serves one invocation. The agent's stderr is a capped pipe,
// never a host file.
//
// Everything it creates on the host carries "wovyr" in its name (container
// ids, cgroup paths, scratch directories), and Reconcile removes leftovers
// whose owner is gone, and nothing else.
package oci
