// Package session keeps long-lived sandboxes that an agent works in over
// many steps: one tenant's claim held across many execs in the same live
// filesystem, with files moved in and out between them.
//
// A session is the invocation pipeline split in time. Its backend is
// chosen once, by the same manager.Select as an invocation (the floor rule
// unchanged, sandbox.KindSession picking among backends whose sandboxes
// implement sandbox.Session), and never changes; its sandbox is leased from
// the same pools and claimed once (sandbox.Session.Open), and each exec is
// one job through the path a Run takes. The daemon (package server) does
// selection, admission and leasing and hands Create an Acquire; this package
// owns what comes after: the lifecycle, its durable record (package store),
// the per-tenant view, expiry, and the end of every session.
//
// # Lifecycle
//
// creating → running → ended, with interrupted reachable from both live
// states (the table is in state.go). ended carries why: deleted,
// idle-timeout, max-lifetime, create-failed or backend-failure. A session
// the daemon stops under (shutdown, or a crash that Recover finds at the
// next start-up) is interrupted, never silently dropped.
//
// What it refuses to do: show one tenant another's session (its id is
// NotFound byte for byte as a missing one); run two operations of one
// session at once (they are serialised); keep a sandbox whose exec left it
// unreachable (the session ends, backend-failure); move a session to
// another backend. Pause and resume (snapshots of the tenant-bound state),
// live output and background processes are later work: an idle session
// ends at its idle timeout instead of pausing.
package session
