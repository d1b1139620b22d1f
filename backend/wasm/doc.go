// Package wasm is wovyr's WebAssembly backend: WASI preview1 core modules run
// on Wasmtime (through package internal/wasmcapi) at strength wasm.
//
// Isolation comes from the module's linear memory and from WASI capabilities:
// the guest has exactly the argv and env it was given, stdio captured into
// capped buffers, the host's CSPRNG and real clocks, no sockets (the linker
// offers preview1 only and no socket is ever preopened, so egress is
// deny-all by construction), and only the directories granted:
//
//   - the workspace, read-write at Workload.Workdir (default /workspace; "/"
//     works): the invocation's own, a fresh tmpfs (source "wovyr-wasm")
//     under StateDir/wasm/work sized to Limits.Disk with an inode bound, so
//     filling it gives the guest ENOSPC. Files are written there before the
//     run; Collect is read back after the guest has ended, confined to the
//     workspace and never following a symlink. It is there whether or not
//     the invocation has files, as under `wasmtime run --dir`, but for a
//     module that imports no WASI call able to name a path or find a
//     preopen (path_*, fd_prestat_get, fd_readdir): it could not tell, so
//     it keeps the in-process path (no mount, no worker).
//   - Config.Preopens, read-only: host directories the operator grants to
//     every invocation (a dataset, a toolchain).
//
// Limits: fuel (class out-of-fuel), the wall deadline through epoch
// interruption driven by one ticker per engine (class timeout, within one
// tick), linear memory and tables through the store limiter (the guest sees
// memory.grow fail; class oom when it dies of it), and the output cap. A
// fresh instance per invocation comes from the pooling allocator, made from
// an InstancePre kept per module digest; compiled code is cached on disk in
// the state dir, keyed by (module digest, engine code-shaping config hash,
// Wasmtime version) and verified by SHA-256 before it is loaded.
//
// Pre-initialisation (Workload.Init, preinit*.go): a module's init export
// (wizer.initialize by default) runs once per module in a tenant-neutral
// instance; its memory and globals are written back into a new module
// (Wizer's transformation), kept 0600 beside the compiled-module cache under
// a key that any change voids, and every invocation starts from it with no
// init run (docs/adr/0019-wasm-preinit.md).
//
// Descriptors (Limits.NoFile): every file a guest opens through a directory
// grant is a host descriptor, and Wasmtime's WASI has no per-store limit
// (nor can its path_open be wrapped through the C API), so in one process a
// guest could exhaust the descriptors of every tenant. An invocation granted
// any directory therefore runs in a worker process (Config.Worker, `wovyr
// wasm-worker`, worker.go): a small pool of long-lived processes, one job at
// a time each, sharing the on-disk module cache. Before each job the worker
// sets its own RLIMIT_NOFILE soft limit so that exactly Limits.NoFile
// descriptor numbers are free (no privilege needed: a process may move its
// soft limit up to its hard limit), so the guest meets EMFILE (reported by
// Wasmtime as errno io) near the bound, in its own process; the limit is
// restored after the store is dropped. A guest with no grant cannot open
// anything, so it stays in-process on the fast path. A worker that dies
// mid-job fails the job with backend-failure and is replaced; cancellation
// kills it (class killed); Close stops the pool, Reconcile kills orphans
// (WorkerEnv marks them). Without Config.Worker the bound is absent and
// battery probe 54 fails, so that configuration is never certified. See
// docs/adr/0004-wasm-descriptor-bound.md.
//
// Unprivileged (Config.Unprivileged, what wovyr uses without root) there is
// no workspace, since only root can mount the sized tmpfs: an invocation
// with files in or out is refused as policy-unenforceable (ErrNoWorkspace),
// never run without its disk quota. The mode is in the config hash and the
// capability, and its battery records the workspace rows as not applicable
// (docs/adr/0015-unprivileged-wasm.md).
//
// What it does not do: Limits.Pids has no meaning (a guest has no
// processes). Limits.CPU is applied as a deadline (a guest runs
// on one thread). Non-empty egress allowlists are refused
// (policy-unenforceable). Class oom is inferred, since the C API does not
// report a refused memory.grow: a guest that fails (non-zero exit or trap)
// with its memory within a Go heap arena (4 MiB) or an eighth of the limit.
//
// Suite adapts the W probes (probes*.go) to package battery; each probe has a
// positive control through a named weakness (weak.go).
//
// ExecMain is the same code path as a process (wovyr wasm-exec), for running
// wasm inside the container, gVisor and microVM backends.
package wasm
