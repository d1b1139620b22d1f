// Package soak holds the soak with faults (issue #24): a test that drives
// the real daemon, `wovyr serve`, as a process on a state directory of its
// own, and kills it with SIGKILL while eight tenants of different weights
// load it. It is a package of its own because it tests the daemon from the
// outside, as an operator's host sees it, and shares nothing with the
// daemon's in-process tests.
//
// The load, from 8 tenants at once (weights 1,1,2,2,3,3,4,4; 6 workers
// each, one invocation outstanding per worker): mostly trusted native
// `sh -c` jobs printing a nonce and 0–64 KiB, a WASI module printing its
// nonce, busybox echo on the container backend and fewer on gVisor (each
// gVisor sandbox costs ~250 ms of a core to refill), wall-clock timeouts,
// OOMs under a 32 MiB limit, DELETEs of running or queued sleeps, long
// polls the client abandons, and bad requests (malformed JSON, an unknown
// field, negative limits, an empty argv) that must be 400 bad-input naming
// the field. The daemon is killed at seeded points (WOVYR_SOAK_SEED
// repeats a run) and restarted on the same state dir.
//
// What it proves, after the last restart and a graceful stop:
//
//   - Nothing is lost silently: every id the API answered with is in the
//     store and terminal, read back through the API; it ran to the outcome
//     its job must have (exact stdout, class timeout, oom, killed for a
//     cancel) or is `lost` with reason daemon-restart. The store holds no
//     record beyond those and, at most, one per submission a kill cut off
//     before its answer (which the client cannot know of): a bad request
//     recorded nothing.
//   - Nothing ran twice. A second run would show as a record that started
//     twice or changed terminal state (queued>running>lost>running>…, which
//     the record's transitions would carry), as another invocation's
//     result or output in a record (each job prints its own nonce, and the
//     result carries its id), or, for a native job, as its nonce twice in a
//     host ledger file every run appends to before anything else (a
//     restarted daemon re-running a lost invocation would write it again,
//     and a run the record says never started must have written nothing).
//     TestCheckRecordCatchesWhatTheSoakLooksFor shows each is caught.
//   - Fairness under faults: over the stretches when every tenant had an
//     invocation queued, per-tenant starts divided by weight have Jain's
//     index ≥ 0.99.
//   - Cleanup is total: no process whose cwd, root or command line is under
//     the soak's directory or whose cgroup is the soak's (named after its
//     tenants or a sandbox its state dir held), no mount under it, no such
//     cgroup below wovyr's prefix, no workspace, bundle or wasm work dir
//     left in the state dir, nothing in the daemon's TMPDIR, and no network
//     namespace or wovyr nft table new since the start.
//
// Without WOVYR_SOAK_FAULTS the test is a short pass for make test (about
// 800 invocations, native and wasm, one kill, about 12 s); WOVYR_SOAK_FAULTS=full
// (make soak-faults) is 10,000 invocations over all four backends with
// three kills, bounded to 9 minutes of load. Certifications and the
// busybox template are kept in /var/cache/wovyr-test/soak between runs
// and used only while `wovyr backends` still calls them certified.
package soak
